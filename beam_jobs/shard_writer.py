"""Globally shuffled, balanced, deterministic TFRecord shards, on any runner at any size.

Every example carries a key (a hash of seed, video id and start); a split's shards hold
its examples in key order (ties broken by the example bytes), shard i of N the ranks
[i*n//N, (i+1)*n//N), so counts differ by at most one. Keys fall into buckets by range
(bucket b holds [b * 2**64 / B, (b + 1) * 2**64 / B)), sized at about --shuffle_bucket_mb.
Two ways to get each bucket sorted (TFDS's writer and its on-disk shuffler are the models):

- spill (local runners): FnApiRunner holds a GroupByKey's whole input in memory, so
  examples never pass through one. Each worker buffers what it gets, and at
  --spill_buffer_mb writes it as one sorted run file per split; only small rows (the
  run's records per bucket) move on. A shard task merges the runs' slices of the buckets
  it overlaps, streaming. Temp files grow with the data, not its square;
  but a distributed runner ends bundles every few elements, so there each bundle
  would spill: do not use it on Dataflow.
- group (distributed runners): examples keyed by (split, bucket) go through one
  GroupByKey, on the runner's own shuffle (Dataflow Shuffle takes hundreds of TB). Each
  bucket is sorted once and written once, as one run file at a deterministic path (a
  retried task rewrites the same bytes); a bucket that outgrows --shuffle_bucket_mb (the
  bucket count is an estimate) is sorted externally, through the worker's local disk.
  A shard task streams its rank range from the one to three bucket files it overlaps,
  seeking with their index: it never holds a bucket.

Both plan from small rows, and the order depends only on the keys, so the two modes, any
runner and any number of workers give byte-identical shards.
"""
from __future__ import annotations

import collections
import dataclasses
import heapq
import itertools
import math
import uuid
from typing import Iterable, Iterator, Mapping, NamedTuple, Optional

import apache_beam as beam
from apache_beam.io.filesystem import CompressionTypes
from apache_beam.io.filesystems import FileSystems
from apache_beam.transforms.window import GlobalWindow
from apache_beam.utils.timestamp import MIN_TIMESTAMP
from apache_beam.utils.windowed_value import WindowedValue

from beam_jobs import paths, progress
from beam_jobs.cut import KeyedExample
from beam_jobs.output_dir import RunDir
from beam_jobs.sorted_runs import RunSlice, Written, sort_bounded, write_run
from beam_jobs.sorted_runs import allow_open_files as _allow_open_files
from readers import format as data_format
from readers.format.tfrecord import FOOTER_BYTES, FRAME_OVERHEAD, HEADER_BYTES

_COMPRESSION = {"none": CompressionTypes.UNCOMPRESSED, "gzip": CompressionTypes.GZIP}
SHUFFLE_MODES = ("spill", "group")


class RunFile(NamedTuple):
    """A sorted run file of one split and what each bucket has in it."""
    split: str
    path: str
    buckets: tuple[tuple[int, int, int, int], ...]  # (bucket, first record, count, bytes)


class Segment(NamedTuple):
    """One bucket's share of a shard: ranks [lo, hi) of the bucket's sorted records."""
    bucket: int
    runs: tuple[tuple[str, int, int], ...]  # (run file, first record, count) per run
    lo: int
    hi: int


class ShardTask(NamedTuple):
    split: str
    index: int
    num_shards: int
    segments: tuple[Segment, ...]
    dropped: frozenset = frozenset()   # keys not to write, in this task's buckets


class WrittenShard(NamedTuple):
    split: str
    index: int
    file: str
    examples: int
    offsets: Optional[str] = None   # the shard's offset index file


@dataclasses.dataclass(frozen=True)
class ShardConfig:
    """How a run's examples become shards."""
    splits: tuple[str, ...]
    compression: str = "none"
    num_shards: Optional[int] = None     # per split; None: one per `shard_bytes`
    shard_bytes: int = 200 << 20
    num_buckets: int = 1                 # key-range buckets per split
    spill_bytes: int = 32 << 20          # spill mode: what one worker buffers
    mode: str = "spill"                  # or "group"
    bucket_bytes: int = 128 << 20        # group mode: what a bucket task sorts in memory


def _count_temp(written: Written) -> None:
    """Beam counters of the temp data (Dataflow's monitoring shows them; the scale
    benchmark reads them): files, and bytes with their framing and index."""
    progress.counter("temp_files_written").inc()
    progress.counter("temp_bytes_written").inc(written.size)


def _sort_bytes():
    """The bytes of each in-memory sort a shuffle task does (a spill buffer, a bucket or
    a chunk of one): its max is what a task held, whatever the bucket estimate said."""
    return progress.distribution("sort_bytes")


def bucket_of(key: int, num_buckets: int) -> int:
    return key * num_buckets >> 64


def _bucket_table(records: list[tuple[int, bytes]], num_buckets: int
                  ) -> tuple[tuple[int, int, int, int], ...]:
    """(bucket, first, count, frame bytes) of sorted records, a row per bucket present."""
    table: list[list[int]] = []
    for index, (key, example) in enumerate(records):
        bucket = bucket_of(key, num_buckets)
        if not table or table[-1][0] != bucket:
            table.append([bucket, index, 0, 0])
        table[-1][2] += 1
        table[-1][3] += len(example) + FRAME_OVERHEAD
    return tuple(tuple(row) for row in table)


class _SpillRuns(beam.DoFn):
    """spill mode: buffers a bundle's examples and writes them as sorted runs."""

    def __init__(self, temp_dir: str, num_buckets: int, spill_bytes: int):
        self._temp_dir, self._num_buckets, self._spill_bytes = temp_dir, num_buckets, spill_bytes

    def start_bundle(self):
        self._buffers: dict[str, list[bytes]] = collections.defaultdict(list)
        self._buffered = 0

    def process(self, element: KeyedExample):
        self._buffers[element.split].append((element.key, element.example))
        self._buffered += len(element.example)
        if self._buffered >= self._spill_bytes:
            yield from self._spill()

    def finish_bundle(self):
        for run in self._spill():
            yield WindowedValue(run, MIN_TIMESTAMP, [GlobalWindow()])

    def _spill(self) -> Iterable[RunFile]:
        spill_id = uuid.uuid4().hex
        if self._buffered:
            _sort_bytes().update(self._buffered)
        for split, records in sorted(self._buffers.items()):
            records.sort()
            path = paths.join(self._temp_dir, "spill", f"{split}-{spill_id}.run")
            _count_temp(write_run(path, records))
            yield RunFile(split, path, _bucket_table(records, self._num_buckets))
        self._buffers.clear()
        self._buffered = 0


class _WriteBucket(beam.DoFn):
    """group mode: one bucket's records, from the GroupByKey -> one sorted run file.

    The bucket count is an estimate: a bucket larger than `budget` bytes is sorted
    externally (sort_bounded), streaming from the GroupByKey's iterable into the file."""

    def __init__(self, temp_dir: str, budget: int):
        self._temp_dir, self._budget = temp_dir, budget

    def process(self, element):
        (split, bucket), records = element
        path = paths.join(self._temp_dir, "buckets", f"{split}-{bucket:07d}.run")
        written = write_run(path, sort_bounded(records, self._budget, _sort_bytes().update))
        _count_temp(written)
        yield RunFile(split, path, ((bucket, 0, written.records, written.frame_bytes),))


def num_shards_for(windows: int, nbytes: int, num_shards: Optional[int],
                   shard_bytes: int) -> int:
    """--num_shards, or enough shards of about `shard_bytes`; never more than windows,
    nor than shard names can number."""
    wanted = num_shards if num_shards else math.ceil(nbytes / shard_bytes)
    return max(1, min(wanted, windows, data_format.MAX_SHARDS))


def plan_shards(run_files: list[RunFile], config: ShardConfig,
                dropped: Mapping[str, frozenset]) -> list[ShardTask]:
    """Cut each split's key order into shards whose counts differ by at most one.

    `dropped`: per split, the keys of windows that must not be written (the windows of
    videos whose id came more than once), left out of the ranks.

    Linear in buckets, shards and dropped keys (after one sort of the buckets): the
    dropped keys are grouped by bucket once, and one sweep walks the buckets and the
    shards' rank ranges together.
    """
    by_split: dict[str, dict[int, list]] = collections.defaultdict(
        lambda: collections.defaultdict(list))
    for run in run_files:
        for bucket, first, count, nbytes in run.buckets:
            by_split[run.split][bucket].append((run.path, first, count, nbytes))
    tasks = []
    for split in config.splits:
        dropped_in: dict[int, list[int]] = collections.defaultdict(list)
        for key in dropped.get(split, ()):
            dropped_in[bucket_of(key, config.num_buckets)].append(key)
        buckets = [(b, tuple(sorted((p, f, c) for p, f, c, _ in runs)),
                    sum(c for _, _, c, _ in runs) - len(dropped_in.get(b, ())))
                   for b, runs in sorted(by_split[split].items())]
        buckets = [row for row in buckets if row[2] > 0]
        total = sum(count for _, _, count in buckets)
        if not total:
            continue
        nbytes = sum(size for runs in by_split[split].values() for _, _, _, size in runs)
        n = num_shards_for(total, nbytes, config.num_shards, config.shard_bytes)
        first_bucket, first_rank = 0, 0   # the first bucket that ends after this shard's lo
        for i in range(n):
            lo, hi = i * total // n, (i + 1) * total // n
            while first_rank + buckets[first_bucket][2] <= lo:
                first_rank += buckets[first_bucket][2]
                first_bucket += 1
            segments, keys = [], []
            at, rank = first_bucket, first_rank
            while at < len(buckets) and rank < hi:
                bucket, runs, count = buckets[at]
                segments.append(Segment(bucket, runs, max(lo - rank, 0), min(hi - rank, count)))
                keys += dropped_in.get(bucket, ())
                rank += count
                at += 1
            tasks.append(ShardTask(split, i, n, tuple(segments), frozenset(keys)))
    return tasks


def _segment_frames(segment: Segment, dropped: frozenset, num_buckets: int
                    ) -> Iterator[bytes]:
    """The frames of ranks [lo, hi) of a bucket, in (key, example) order, streamed: from
    one sorted bucket file (group) by its index; from several runs (spill) by merging
    their keys from the bucket's start, one open file per run. Never a whole bucket in
    memory, and no frame is parsed: it goes to the shard as the run holds it."""
    has_dropped = any(bucket_of(k, num_buckets) == segment.bucket for k in dropped)
    if len(segment.runs) == 1 and not has_dropped:
        path, first, _ = segment.runs[0]
        yield from _counted(RunSlice(path, first + segment.lo, first + segment.hi))
        return
    _allow_open_files(len(segment.runs) + 64)
    runs = [RunSlice(path, first, first + count) for path, first, count in segment.runs]
    frames = [_counted(run) for run in runs]
    merged = heapq.merge(*([(key, i) for key in run.keys] for i, run in enumerate(runs)))
    kept = (frame for key, frame in _in_order(merged, frames) if key not in dropped)
    yield from itertools.islice(kept, segment.lo, segment.hi)


def _in_order(merged: Iterator[tuple[int, int]], frames: list[Iterator[bytes]]
              ) -> Iterator[tuple[int, bytes]]:
    """(key, frame) in (key, example) order, from the runs' keys merged as (key, run):
    each run's next frame in turn. Records of one key from several runs (a 64-bit hash
    collision; duplicate ids are dropped) are put in order of their examples' bytes, as
    one sort of them all would."""
    for key, group in itertools.groupby(merged, key=lambda entry: entry[0]):
        tied = [next(frames[run]) for _, run in group]
        if len(tied) > 1:
            tied.sort(key=lambda frame: frame[HEADER_BYTES:-FOOTER_BYTES])
        for frame in tied:
            yield key, frame


def _counted(run: RunSlice) -> Iterator[bytes]:
    """A run slice's frames, counting the temp bytes a shard task reads: its index
    lookup and its frames."""
    read = progress.counter("temp_bytes_read")
    read.inc(run.lookup_bytes)
    for frame in run.frames():
        read.inc(len(frame))
        yield frame


class _WriteShard(beam.DoFn):
    def __init__(self, run: RunDir, compression: str, num_buckets: int):
        self._run, self._output_dir, self._compression = run, run.output_dir, compression
        self._num_buckets = num_buckets

    def process(self, task: ShardTask):
        name = self._run.shard_name(task.split, task.index, task.num_shards, self._compression)
        # Written in place: a retried task rewrites the same bytes, and no reader looks
        # at a shard before dataset.json lists it.
        path = paths.join(self._output_dir, name)
        offsets = [0]
        with FileSystems.create(path, compression_type=_COMPRESSION[self._compression]) as f:
            for segment in task.segments:
                for frame in _segment_frames(segment, task.dropped, self._num_buckets):
                    f.write(frame)
                    offsets.append(offsets[-1] + len(frame))
        progress.counter("shard_bytes_written").inc(offsets[-1])
        index = None
        if self._compression == "none":   # a gzip stream cannot be entered mid-way
            index = data_format.index_name(name)
            with FileSystems.create(paths.join(self._output_dir, index),
                                    compression_type=CompressionTypes.UNCOMPRESSED) as f:
                f.write(data_format.index.encode(offsets))
        yield WrittenShard(task.split, task.index, name, len(offsets) - 1, index)


def _record_shard_names(tasks: list[ShardTask], run: RunDir, compression: str
                        ) -> list[ShardTask]:
    """List the shards in the run folder before any is written, so that a rerun after a
    kill can tell them from foreign files."""
    names = [run.shard_name(t.split, t.index, t.num_shards, compression) for t in tasks]
    run.record_shards(names + ([data_format.index_name(n) for n in names]
                               if compression == "none" else []))
    return tasks


class WriteShuffledShards(beam.PTransform):
    """PCollection[KeyedExample] -> PCollection[WrittenShard], written to the run's
    output directory, in `config.mode`.

    `dropped` is a singleton side input: per split, the keys of windows to leave out.
    """

    def __init__(self, run: RunDir, config: ShardConfig, dropped):
        super().__init__()
        if config.mode not in SHUFFLE_MODES:
            raise ValueError(f"shuffle mode must be one of {SHUFFLE_MODES}, got {config.mode!r}")
        self._run, self._config, self._dropped = run, config, dropped

    def expand(self, examples):
        config, temp = self._config, self._run.temp_dir
        if config.mode == "spill":
            runs = examples | "SpillRuns" >> beam.ParDo(
                _SpillRuns(temp, config.num_buckets, config.spill_bytes))
        else:
            runs = (examples
                    | "KeyByBucket" >> beam.Map(lambda e: (
                        (e.split, bucket_of(e.key, config.num_buckets)),
                        (e.key, e.example)))
                    | "GroupBuckets" >> beam.GroupByKey()
                    | "WriteBuckets" >> beam.ParDo(_WriteBucket(temp, config.bucket_bytes)))
        return (
            runs
            | "GatherRuns" >> beam.combiners.ToList()
            | "PlanShards" >> beam.Map(lambda files, dropped: plan_shards(files, config, dropped),
                                       self._dropped)
            | "RecordShardNames" >> beam.Map(_record_shard_names, self._run, config.compression)
            | "SplitTasks" >> beam.FlatMap(lambda tasks: tasks)
            | "SpreadShards" >> beam.Reshuffle()
            | "WriteShards" >> beam.ParDo(
                _WriteShard(self._run, config.compression, config.num_buckets)))
