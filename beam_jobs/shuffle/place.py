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
   writes its index and window table (both follow from the plan) and a placement file
   in the run's temp folder: its records' keys in order, and where each frame starts.
2. The second pass cuts the videos again (a WRITE cut: the examples alone) and
   `PlaceWindows` writes each window's frame at its place: its shard by its key (a
   split's shards hold consecutive ranges of its sorted keys), its offset from the
   shard's placement file (memory-mapped, searched). A frame whose size is not the one
   planned, or a key not planned, stops the run.
3. Before the commit, `CheckPlaced` holds every shard to the plan (as many frames
   written as it holds) and each video's second read to its first (its frames' count
   and their CRC32C, `records.Checked`): an input changed between the passes stops the
   run, rather than commit a dataset of two inputs.

The shards are the spill's, byte for byte: the same frames in the same key order. Two
windows of one key (a 64-bit collision, about one run in 250,000 at 12 million windows)
cannot be placed by key: the run stops and says to run --shuffle spill. Written at
offsets, shards need a filesystem that takes them: a local one (job/runners.py decides
where this mode runs).
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
from beam_jobs.core.records import Checked, KeyedExample, WrittenShard, planned_fields
from beam_jobs.core.run_dir import RunDir
from beam_jobs.shuffle.config import ShardConfig
from beam_jobs.shuffle.plan import ShardTask
from beam_jobs.shuffle.write import segment_frames, shard_tasks, write_side_files
from readers.format import tfrecord
from readers.format.tfrecord import FOOTER_BYTES, HEADER_BYTES

_PLACEMENTS = "placements"


class CannotPlace(RuntimeError):
    """This run's windows cannot be placed: the input changed between its two reads, or
    two windows share a key. Its message is one line; the run commits nothing."""


class Placement(NamedTuple):
    """Where one shard's windows go: the shard's path, the first (smallest) key it
    holds, and its placement file (`save_plan`)."""
    split: str
    path: str
    first_key: int
    plan: str


def save_plan(path: str, keys: list[int], offsets: list[int]) -> None:
    """A shard's placement file: its n records' keys in order, then where each frame
    starts and where the last ends (n + 1 offsets), uint64."""
    os.makedirs(os.path.dirname(path), exist_ok=True)
    np.save(path, np.array(keys + offsets, np.uint64))


def load_plan(path: str) -> tuple[np.ndarray, np.ndarray]:
    """(keys, offsets) of a placement file, memory-mapped."""
    both = np.load(path, mmap_mode="r")
    records = (len(both) - 1) // 2
    return both[:records], both[records:]


class WriteInPlace(beam.PTransform):
    """A PLAN cut's records -> PCollection[WrittenShard], each window written once at
    its place (the module's docstring). `first`: the PLAN cut's Checked rows; `read`:
    the source's read (videos, failures, skipped), run again; `cut`: a WRITE cut."""

    def __init__(self, run: RunDir, config: ShardConfig, dropped, first: beam.PCollection,
                 read: beam.PTransform, cut: beam.PTransform):
        super().__init__()
        self._run, self._config, self._dropped = run, config, dropped
        self._first, self._read, self._cut = first, read, cut

    def expand(self, records):
        planned = records | "PlanShards" >> PlanShards(self._run, self._config, self._dropped)
        again, _, _ = records.pipeline | "ReadVideosAgain" >> self._read
        written = again | "CutAgain" >> self._cut
        placed = written.examples | "PlaceWindows" >> beam.ParDo(
            PlaceWindows(), beam.pvalue.AsList(planned.placements), self._dropped)
        return ((planned.shards, placed, self._first, written.checked)
                | "CheckPlaced" >> CheckPlaced(self._run.output_dir))


class PlannedShards(NamedTuple):
    shards: beam.PCollection       # WrittenShard, its frames yet to be written
    placements: beam.PCollection   # Placement, one a shard with windows


class PlanShards(beam.PTransform):
    """A PLAN cut's records -> `PlannedShards`: each shard made at its size, its index
    and window table written, its placement file in the run's temp folder."""

    def __init__(self, run: RunDir, config: ShardConfig, dropped):
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
    (`PlaceWindows` writes them), its index and window table, and its placement."""

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
                if keys and key == keys[-1]:
                    raise CannotPlace(
                        f"two windows of split {task.split} share the key {key:#018x} (a "
                        "64-bit collision of their ids and starts): --shuffle place cannot "
                        "tell their places apart; run again with --shuffle spill")
                keys.append(key)
                offsets.append(offsets[-1] + size)
                videos.append(video)
                valid.append(frames)
        path = paths.join(self._run.output_dir, name)
        with open(path, "wb") as f:     # its frames to come, at their offsets
            f.truncate(offsets[-1])
        yield write_side_files(self._run.output_dir, task, name, offsets, videos, valid, "none")
        if keys:
            plan = paths.join(self._run.temp_dir, "place", f"{name}.npy")
            save_plan(plan, keys, offsets)
            yield beam.pvalue.TaggedOutput(_PLACEMENTS, Placement(task.split, path, keys[0],
                                                                  plan))


class PlaceWindows(beam.DoFn):
    """A WRITE cut's examples -> each frame written at its place in its shard; at each
    bundle's end, (shard path, frames written) per shard. The placements (a side input:
    one per shard) and each shard's placement file and descriptor are kept per worker.
    `dropped`: the windows left out (duplicates, aliases), which have no place."""

    def setup(self):
        self._shards: dict[str, tuple[list[int], list[Placement]]] = {}
        self._plans: dict[str, tuple[np.ndarray, np.ndarray]] = {}
        self._files: dict[str, int] = {}
        self._bytes = progress.counter("shard_bytes_written")

    def start_bundle(self):
        self._written: collections.Counter[str] = collections.Counter()

    def process(self, example: KeyedExample, placements: list[Placement], dropped: Any):
        if example.key in dropped.get(example.split, ()):
            return
        placement = self._placement(example, placements)
        keys, offsets = self._plan(placement.plan)
        at = int(np.searchsorted(keys, np.uint64(example.key)))
        if at == len(keys) or int(keys[at]) != example.key:
            raise CannotPlace(_changed(f"a window of split {example.split} (key "
                                        f"{example.key:#018x}) that the first pass did not "
                                        "plan"))
        start, end = int(offsets[at]), int(offsets[at + 1])
        header, footer = tfrecord.header(len(example.example)), tfrecord.footer(example.example)
        if len(header) + len(example.example) + len(footer) != end - start:
            raise CannotPlace(_changed(
                f"a window of {len(example.example) + tfrecord.FRAME_OVERHEAD} bytes where "
                f"the first pass planned {end - start}"))
        os.pwritev(self._file(placement.path), [header, example.example, footer], start)
        self._written[placement.path] += 1
        self._bytes.inc(end - start)

    def finish_bundle(self):
        for path, count in self._written.items():
            yield WindowedValue((path, count), MIN_TIMESTAMP, [GlobalWindow()])

    def teardown(self):
        for fd in self._files.values():
            os.close(fd)

    def _placement(self, example: KeyedExample, placements: list[Placement]) -> Placement:
        """The placement of the shard that holds the key of `example`: the last of its
        split whose first key is not greater."""
        found = self._shards.get(example.split)
        if found is None:
            mine = sorted((p for p in placements if p.split == example.split),
                          key=lambda p: p.first_key)
            found = self._shards[example.split] = ([p.first_key for p in mine], mine)
        first_keys, mine = found
        at = bisect.bisect_right(first_keys, example.key) - 1
        if at < 0:
            raise CannotPlace(_changed(f"a window of split {example.split} that no shard "
                                        "of the first pass holds"))
        return mine[at]

    def _plan(self, path: str) -> tuple[np.ndarray, np.ndarray]:
        plan = self._plans.get(path)
        if plan is None:
            plan = self._plans[path] = load_plan(path)
        return plan

    def _file(self, path: str) -> int:
        fd = self._files.get(path)
        if fd is None:
            fd = self._files[path] = os.open(path, os.O_WRONLY | os.O_CLOEXEC)
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
                lambda s, output_dir: (paths.join(output_dir, s.file), s.examples),
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
                     "(frames, CRC32C)")]


def _when_sound(shard: WrittenShard, problems: list[str]) -> WrittenShard:
    if problems:
        raise CannotPlace(f"{problems[0]}" + (f" (and {len(problems) - 1} more)"
                                               if len(problems) > 1 else ""))
    return shard
