"""--shuffle place: each window written once, at its place in its shard.

The spill writes every window twice, into sorted files and then into a shard: past the
page cache a run waits on the disk for twice the dataset's bytes. But where a window
goes depends on its key and on the size of its frame alone: a key is a hash of (seed,
video id, start), a video's starts follow from its frame count, and a latent window's
frame size from its id's length and its start (readers.format.ExampleEncoder.
frame_size). So a run reads its input twice:

1. The first pass cuts each video to its windows' keys and frame sizes (a PLAN cut,
   cut/examples.py: every check, the digest and the statistics, no example), and
   shuffles those small records as spill mode shuffles examples (shuffle/write.py's
   `shard_tasks`: sorted files of 16-byte records, the duplicates' and aliases' windows
   left out). `PlaceShard` then makes each shard at its size, with nothing in it yet,
   writes its index and window table (both follow from the plan) and its part of its
   split's placement file in the run's temp folder: the split's keys in order, where
   each frame starts in its shard and its size (20 bytes a window, `SplitPlan`).
2. The second pass cuts the videos again (a WRITE cut: the examples alone) and
   `PlaceWindows` writes each window's frame at its place: its shard is the last whose
   first key is not greater than its key (a split's shards hold consecutive ranges of
   its sorted keys), its offset the one of its key in that shard's rows of the split's
   placement file (memory-mapped, searched). A frame whose size is not the one
   planned, or a key not planned, stops the run.
3. Before the commit, `CheckPlaced` holds every shard to the plan (as many frames
   written as it holds) and each video's second read to its first (its frames' count,
   and the CRC32C of its frames and its metadata, `records.Checked`): an input changed
   between the passes stops the run, rather than commit a dataset of two inputs.

The shards are the spill's, byte for byte: the same frames in the same key order. Two
windows of one key (a 64-bit collision, about one run in 250,000 at 12 million windows)
cannot be placed by key: the run stops and says to run --shuffle spill. Written at
offsets, shards need a filesystem that takes them: a local one (job/runners.py decides
where this mode runs). A worker maps each split's placement file, 20 bytes a window
(1 GB at 50 million windows, 4 TB of shards): clean file pages, which the kernel
drops under pressure and reads back when needed.
"""
from __future__ import annotations

import bisect
import collections
import os
from typing import Any, NamedTuple, Optional

import apache_beam as beam
import numpy as np
from apache_beam.transforms.window import GlobalWindow
from apache_beam.utils.timestamp import MIN_TIMESTAMP
from apache_beam.utils.windowed_value import WindowedValue

from beam_jobs.core import paths, progress
from beam_jobs.core.records import Checked, KeyedExample, SplitShard, planned_fields
from beam_jobs.core.run_dir import RunDir
from beam_jobs.shuffle.config import ShuffleConfig
from beam_jobs.shuffle.plan import ShardTask
from beam_jobs.shuffle.write import segment_frames, shard_tasks, write_side_files
from readers.format import tfrecord
from readers.format.tfrecord import FOOTER_BYTES, HEADER_BYTES
from readers.format.writer import shard_ranges

_PLACEMENTS = "placements"
OPEN_SHARDS = 256   # shard files a PlaceWindows worker keeps open


class CannotPlace(RuntimeError):
    """This run's windows cannot be placed: the input changed between its two reads, or
    two windows share a key. Its message is one line; the run commits nothing."""


class Placement(NamedTuple):
    """Where one shard's windows go: its split and number, the key of its first window,
    its records' rows in its split's placement file (from `first`, `records` of them, in
    a file of `split_records`: `SplitPlan`), and that file."""
    split: str
    number: int
    num_shards: int
    first_key: int
    first: int
    records: int
    split_records: int
    plan: str


class SplitPlan(NamedTuple):
    """A split's placement file, memory-mapped: of each of its records, in key order,
    the key (uint64), where its frame starts in its shard (uint64) and its frame's size
    (uint32). Each shard task writes its part at the rank its plan gives its first
    record; where the plan counted windows dropped later (copies of one id: one key,
    several windows), the rows at a shard's end stay unwritten, and unread."""
    keys: np.ndarray
    starts: np.ndarray
    sizes: np.ndarray

    @classmethod
    def open(cls, path: str, records: int) -> "SplitPlan":
        # an ndarray of the mapping (not np.memmap, whose every index makes a memmap)
        raw, n = np.asarray(np.memmap(path, np.uint8, "r")), records
        return cls(raw[:8 * n].view(np.uint64), raw[8 * n:16 * n].view(np.uint64),
                   raw[16 * n:20 * n].view(np.uint32))

    @staticmethod
    def write_part(path: str, records: int, first: int, keys: list[int],
                   offsets: list[int]) -> None:
        """Write one shard's part: its records' keys, starts and sizes (`offsets`: where
        each frame starts, then where the last ends) from rank `first` on, in a file of
        `records` rows; the file is made at that size by the first part written."""
        starts = np.array(offsets, np.uint64)
        parts = ((np.array(keys, np.uint64), 0), (starts[:-1], 8),
                 (np.diff(starts).astype(np.uint32), 16))
        os.makedirs(os.path.dirname(path), exist_ok=True)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_CLOEXEC, 0o644)
        try:
            os.ftruncate(fd, max(os.fstat(fd).st_size, 20 * records))
            for column, at in parts:
                os.pwrite(fd, column.tobytes(), at * records + column.itemsize * first)
        finally:
            os.close(fd)


class WriteInPlace(beam.PTransform):
    """A PLAN cut's records -> PCollection[SplitShard], each window written once at
    its place (the module's docstring). `first`: the PLAN cut's Checked rows; `read`:
    the source's read (videos, failures, skipped), run again; `cut`: a WRITE cut."""

    def __init__(self, run: RunDir, config: ShuffleConfig, dropped, first: beam.PCollection,
                 read: beam.PTransform, cut: beam.PTransform):
        super().__init__()
        self._run, self._config, self._dropped = run, config, dropped
        self._first, self._read, self._cut = first, read, cut

    def expand(self, records):
        planned = records | "PlanShards" >> PlanShards(self._run, self._config, self._dropped)
        again, _, _ = records.pipeline | "ReadVideosAgain" >> self._read
        written = again | "CutAgain" >> self._cut
        placed = written.examples | "PlaceWindows" >> beam.ParDo(
            PlaceWindows(self._run), beam.pvalue.AsList(planned.placements), self._dropped)
        return ((planned.shards, placed, self._first, written.checked)
                | "CheckPlaced" >> CheckPlaced(self._run.output_dir))


class PlannedShards(NamedTuple):
    shards: beam.PCollection       # SplitShard, its frames yet to be written
    placements: beam.PCollection   # Placement, one a shard with windows


class PlanShards(beam.PTransform):
    """A PLAN cut's records -> `PlannedShards`: each shard made at its size, its index
    and window table written, its split's placement file in the run's temp folder."""

    def __init__(self, run: RunDir, config: ShuffleConfig, dropped):
        super().__init__()
        self._run, self._config, self._dropped = run, config, dropped

    @beam.typehints.no_annotations   # a tuple of PCollections: mypy's, not Beam's
    def expand(self, planned) -> PlannedShards:
        shards = (shard_tasks(planned, self._run, self._config, self._dropped,
                              lambda record: planned_fields(record)[1])
                  | "PlaceShards" >> beam.ParDo(
                      PlaceShard(self._run, self._config.num_buckets)).with_outputs(
                          _PLACEMENTS, main="shards"))
        return PlannedShards(shards.shards, shards[_PLACEMENTS])


class PlaceShard(beam.DoFn):
    """A shard task of planned records -> the shard, its size and no frame written yet
    (`PlaceWindows` writes them), its index and window table, its part of its split's
    placement file, and its Placement (a shard with windows)."""

    def __init__(self, run: RunDir, num_buckets: int):
        self._run, self._num_buckets = run, num_buckets

    def process(self, task: ShardTask):
        name = self._run.shard_name(task.split, task.index, task.num_shards, "none")
        keys: list[int] = []
        offsets, videos, valid = [0], [], []
        for segment in task.segments:
            for frame, video, frames in segment_frames(segment, task.dropped,
                                                       self._num_buckets):
                key, size = planned_fields(frame[HEADER_BYTES:-FOOTER_BYTES])
                keys.append(key)
                offsets.append(offsets[-1] + size)
                videos.append(video)
                valid.append(frames)
        with open(paths.join(self._run.output_dir, name), "wb") as f:   # frames to come
            f.truncate(offsets[-1])
        yield write_side_files(self._run.output_dir, task.split, name, offsets, videos, valid,
                               "none")
        if keys:
            plan = paths.join(self._run.temp_dir, "place", f"{task.split}.plan")
            first = shard_ranges(task.split_records, task.num_shards)[task.index][0]
            SplitPlan.write_part(plan, task.split_records, first, keys, offsets)
            yield beam.pvalue.TaggedOutput(_PLACEMENTS, Placement(
                task.split, task.index, task.num_shards, keys[0], first, len(keys),
                task.split_records, plan))


class PlaceWindows(beam.DoFn):
    """A WRITE cut's examples -> each frame written at its place in its shard; at each
    bundle's end, (shard path, frames written) per shard. The placements (a side input:
    one per shard with windows) and each split's plan, mapped, are kept per worker.
    `dropped`: the windows left out (duplicates, aliases), which have no place."""

    def __init__(self, run: RunDir):
        self._run = run

    def setup(self):
        self._plans: dict[str, tuple[SplitPlan, list[int], list[Placement], list[str]]] = {}
        self._files: dict[str, int] = {}
        self._bytes = progress.counter("shard_bytes_written")

    def start_bundle(self):
        self._written: collections.Counter[str] = collections.Counter()

    def process(self, element: KeyedExample, placements: list[Placement], dropped: Any):
        split, (window_key, example, _, _) = element
        if window_key in dropped.get(split, ()):
            return
        plan, first_keys, shards, shard_paths = self._plan(split, placements)
        i = bisect.bisect_right(first_keys, window_key) - 1
        shard = shards[max(i, 0)]
        keys = plan.keys[shard.first:shard.first + shard.records]
        key = np.uint64(window_key)
        at = int(np.searchsorted(keys, key))
        if i < 0 or at == len(keys) or keys[at] != key:
            raise CannotPlace(_changed(f"a window of split {split} (key "
                                       f"{window_key:#018x}) that the first pass did not "
                                       "plan"))
        following = (keys[at + 1] if at + 1 < len(keys) else
                     first_keys[i + 1] if i + 1 < len(first_keys) else None)
        if following == key:
            raise CannotPlace(
                f"two windows of split {split} share the key {window_key:#018x} "
                "(a 64-bit collision of their ids and starts): --shuffle place cannot tell "
                "their places apart; run again with --shuffle spill")
        row = shard.first + at
        size = len(example) + tfrecord.FRAME_OVERHEAD
        if size != plan.sizes[row]:
            raise CannotPlace(_changed(f"a window of {size} bytes where the first pass "
                                       f"planned {plan.sizes[row]}"))
        path = shard_paths[i]
        os.pwritev(self._file(path), [tfrecord.header(len(example)), example,
                                      tfrecord.footer(example)], int(plan.starts[row]))
        self._written[path] += 1
        self._bytes.inc(size)

    def finish_bundle(self):
        for path, count in self._written.items():
            yield WindowedValue((path, count), MIN_TIMESTAMP, [GlobalWindow()])

    def teardown(self):
        for fd in self._files.values():
            os.close(fd)

    def _plan(self, split: str, placements: list[Placement]
              ) -> tuple[SplitPlan, list[int], list[Placement], list[str]]:
        """The split's plan, and its shards with windows by their first keys, with their
        paths."""
        found = self._plans.get(split)
        if found is None:
            shards = sorted((p for p in placements if p.split == split),
                            key=lambda p: p.first_key)
            if not shards:
                raise CannotPlace(_changed(f"a window of split {split}, which the first "
                                           "pass did not plan"))
            found = self._plans[split] = (
                SplitPlan.open(shards[0].plan, shards[0].split_records),
                [p.first_key for p in shards], shards,
                [paths.join(self._run.output_dir, self._run.shard_name(
                    split, p.number, p.num_shards, "none")) for p in shards])
        return found

    def _file(self, path: str) -> int:
        """The shard's descriptor, the last OPEN_SHARDS used kept open: a run of 20,000
        shards would pass the process's limit on open files (often 1,024)."""
        fd = self._files.pop(path, None)
        if fd is None:
            if len(self._files) >= OPEN_SHARDS:
                os.close(self._files.pop(next(iter(self._files))))
            fd = os.open(path, os.O_WRONLY | os.O_CLOEXEC)
        self._files[path] = fd     # the most recently used last
        return fd


def _changed(what: str) -> str:
    return f"the input changed while this run read it twice (--shuffle place): {what}"


class CheckPlaced(beam.PTransform):
    """(planned shards, frames written per shard, the first pass's Checked rows, the
    second's) -> the shards, once every shard holds the frames planned and the two
    passes read the same videos; otherwise the run stops (CannotPlace)."""

    def __init__(self, output_dir: str):
        super().__init__()
        self._output_dir = output_dir

    @beam.typehints.no_annotations   # a tuple of PCollections: mypy's, not Beam's
    def expand(self, inputs):
        shards, written, first, second = inputs
        unwritten = (
            {"planned": shards | "PlannedFrames" >> beam.Map(
                lambda s, output_dir: (paths.join(output_dir, s.shard.file), s.shard.examples),
                self._output_dir),
             "written": written | "WrittenFrames" >> beam.CombinePerKey(sum)}
            | "JoinFrames" >> beam.CoGroupByKey()
            | "Unwritten" >> beam.FlatMap(_unwritten))
        changed = (
            {"first": first | "KeyFirst" >> beam.Map(_by_record),
             "second": second | "KeySecond" >> beam.Map(_by_record)}
            | "JoinPasses" >> beam.CoGroupByKey()
            | "Changed" >> beam.FlatMap(_changed_video))
        problems = (unwritten, changed) | "Problems" >> beam.Flatten()
        return shards | "WhenPlaced" >> beam.Map(_when_sound, beam.pvalue.AsList(problems))


def _by_record(checked: Checked) -> tuple[tuple[str, Optional[int]], tuple[int, int]]:
    return (checked.source, checked.record_index), (checked.frames, checked.crc32c)


def _unwritten(joined) -> list[str]:
    path, counts = joined
    planned, written = sum(counts["planned"]), sum(counts["written"])
    return [] if planned == written else [
        f"{os.path.basename(path)}: {written} frames written, {planned} planned"]


def _changed_video(joined) -> list[str]:
    (source, record_index), reads = joined
    first, second = list(reads["first"]), list(reads["second"])
    if first == second:
        return []
    where = source + ("" if record_index is None else f" #{record_index}")
    return [_changed(f"{where} read {first} the first time, {second} the second "
                     "(frames, CRC32C of frames and metadata)")]


def _when_sound(shard: SplitShard, problems: list[str]) -> SplitShard:
    if problems:
        raise CannotPlace(f"{problems[0]}" + (f" (and {len(problems) - 1} more)"
                                               if len(problems) > 1 else ""))
    return shard
