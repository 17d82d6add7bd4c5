"""Globally shuffled, balanced, deterministic TFRecord shards, on any runner at any size.

Every example carries a key (a hash of seed, video id and start); a split's shards hold
its examples in key order (ties broken by the example bytes), shard i of N the ranks
[i*n//N, (i+1)*n//N), so counts differ by at most one. Keys fall into buckets by range
(bucket b holds [b * 2**64 / B, (b + 1) * 2**64 / B)), sized at about --shuffle_bucket_mb.
Two ways to get each bucket sorted (TFDS's writer and its on-disk shuffler are the models):

- spill (local runners): FnApiRunner holds a GroupByKey's whole input in memory, so
  examples never pass through one. Each worker buffers what it gets, and at
  --spill_buffer_mb writes it as one sorted file per split; only small rows (the file's
  records per bucket) move on. A shard task merges the files' slices of the buckets it
  overlaps, streaming. Temp files grow with the data, not its square;
  but a distributed runner ends bundles every few elements, so there each bundle
  would spill: do not use it on Dataflow.
- group (distributed runners): examples keyed by (split, bucket) go through one
  GroupByKey, on the runner's own shuffle (Dataflow Shuffle takes hundreds of TB). Each
  bucket is sorted once and written once, as one sorted file at a deterministic path (a
  retried task rewrites the same bytes); a bucket that outgrows --shuffle_bucket_mb (the
  bucket count is an estimate) is sorted externally, through the worker's local disk.
  A shard task streams its rank range from the one to three bucket files it overlaps,
  seeking with their index: it never holds a bucket.

Both plan from small rows (shuffle/plan.py), and the order depends only on the keys, so
the two modes, any runner and any number of workers give byte-identical shards. A third,
place (shuffle/place.py), sorts small planned records as spill sorts examples
(`shard_tasks`), then writes each window once, at its place.
"""
from __future__ import annotations

import collections
import heapq
import itertools
import uuid
from typing import Callable, Iterable, Iterator, Optional

import apache_beam as beam
from apache_beam.transforms.window import GlobalWindow
from apache_beam.utils.timestamp import MIN_TIMESTAMP
from apache_beam.utils.windowed_value import WindowedValue

from beam_jobs.core import paths, progress, streams, writeback
from beam_jobs.core.gather import ApplyToAll
from beam_jobs.core.one_behind import OneBehind
from beam_jobs.core.records import KeyedExample, SplitShard
from beam_jobs.core.run_dir import RunDir
from beam_jobs.shuffle.config import SHUFFLE_MODES, ShuffleConfig
from beam_jobs.shuffle.plan import (
    BucketSpan,
    Segment,
    ShardTask,
    SortedFile,
    bucket_of,
    plan_shards,
)
from beam_jobs.shuffle.sorted_files import (
    SortedSlice,
    Written,
    allow_open_files,
    sort_bounded,
    write_sorted,
)
from readers import format as data_format
from readers.format import writer
from readers.format.tfrecord import FOOTER_BYTES, FRAME_OVERHEAD, HEADER_BYTES
from readers.format.writer import WindowRecord


def _count_temp(written: Optional[list[Written]]) -> None:
    """Beam counters of the temp data (Dataflow's monitoring shows them; the scale
    benchmark reads them): files, and bytes with their framing and index. Counted on
    the bundle's own thread, where Beam's counters count."""
    for each in written or ():
        progress.counter("temp_files_written").inc()
        progress.counter("temp_bytes_written").inc(each.size)


def _sort_bytes():
    """The bytes of each in-memory sort a shuffle task does (a spill buffer, a bucket or
    a chunk of one): its max is what a task held, whatever the bucket estimate said."""
    return progress.distribution("sort_bytes")


def example_frame_bytes(example: bytes) -> int:
    """The bytes of the shard frame a shuffled record's example takes: its own framed."""
    return len(example) + FRAME_OVERHEAD


def _bucket_spans(records: list[WindowRecord], num_buckets: int,
                  frame_bytes: Callable[[bytes], int]) -> tuple[BucketSpan, ...]:
    """Where each bucket present lies in sorted records, and the bytes its records take
    in shards (`frame_bytes` of each one's example)."""
    spans: list[BucketSpan] = []
    for index, (key, example, _, _) in enumerate(records):
        bucket, nbytes = bucket_of(key, num_buckets), frame_bytes(example)
        if spans and spans[-1].bucket == bucket:
            last = spans[-1]
            spans[-1] = last._replace(count=last.count + 1, nbytes=last.nbytes + nbytes)
        else:
            spans.append(BucketSpan(bucket, index, 1, nbytes))
    return tuple(spans)


# What a buffered record holds beyond its example's bytes: its tuple, its key, video and
# valid count, the bytes object's header and its list slot (CPython, 64-bit). Nothing
# beside an 80 KB window; 15 times a 16-byte planned record (shuffle/place.py).
HELD_PER_RECORD = 232


class _Spill(beam.DoFn):
    """spill mode: buffers a bundle's examples and writes them as sorted files.

    A full buffer is sorted here and written behind (core/one_behind.py) while the next
    one fills, the cut that feeds this step running meanwhile. The buffer being written
    lets each record go once written, so a worker holds at most about two buffers. The
    bundle ends only once its files are written (or with the error of one that was not),
    and nothing reads a sorted file before its bundle has ended: the files are gathered
    first (PlanShards)."""

    def __init__(self, temp_dir: str, num_buckets: int, spill_bytes: int,
                 frame_bytes: Callable[[bytes], int]):
        self._temp_dir, self._num_buckets, self._spill_bytes = temp_dir, num_buckets, spill_bytes
        self._frame_bytes = frame_bytes

    def setup(self):
        self._behind = OneBehind("spill")

    def start_bundle(self):
        self._buffers: dict[str, list[WindowRecord]] = collections.defaultdict(list)
        self._buffered = 0

    def process(self, element: KeyedExample):
        split, record = element
        self._buffers[split].append(record)
        self._buffered += len(record.example) + HELD_PER_RECORD
        if self._buffered >= self._spill_bytes:
            yield from self._spill()

    def finish_bundle(self):
        files = list(self._spill())
        _count_temp(self._behind.wait())
        for written in files:
            yield WindowedValue(written, MIN_TIMESTAMP, [GlobalWindow()])

    def teardown(self):
        """A failed bundle never reaches finish_bundle: the write it left running is
        waited for here, so that nothing writes into the run's folder after the failure
        has cleaned it up (its error is the bundle's, raised already or moot)."""
        self._behind.close()

    def _spill(self) -> Iterable[SortedFile]:
        if not self._buffered:
            return
        _sort_bytes().update(self._buffered)
        spill_id = uuid.uuid4().hex
        files = []
        for split, records in sorted(self._buffers.items()):
            records.sort()
            path = paths.join(self._temp_dir, "spill", f"{split}-{spill_id}.sorted")
            files.append((path, records))
            yield SortedFile(split, path, _bucket_spans(records, self._num_buckets,
                                                        self._frame_bytes))
        _count_temp(self._behind.submit(_write_spill, files))
        self._buffers = collections.defaultdict(list)
        self._buffered = 0


def _write_spill(files: list[tuple[str, list[WindowRecord]]]) -> list[Written]:
    return [write_sorted(path, _letting_go(records)) for path, records in files]


def _letting_go(records: list[WindowRecord]) -> Iterator[WindowRecord]:
    """The records in order, each dropped from the list as it is handed out."""
    records.reverse()
    while records:
        yield records.pop()


class _WriteBucket(beam.DoFn):
    """group mode: one bucket's records, from the GroupByKey -> one sorted file.

    The bucket count is an estimate: a bucket larger than `budget` bytes is sorted
    externally (sort_bounded), streaming from the GroupByKey's iterable into the file."""

    def __init__(self, temp_dir: str, budget: int):
        self._temp_dir, self._budget = temp_dir, budget

    def process(self, element):
        (split, bucket), records = element
        path = paths.join(self._temp_dir, "buckets", f"{split}-{bucket:07d}.sorted")
        written = write_sorted(path, sort_bounded(records, self._budget, _sort_bytes().update))
        _count_temp([written])
        yield SortedFile(split, path, (BucketSpan(bucket, 0, written.records,
                                                  written.frame_bytes),))


def segment_frames(segment: Segment, dropped: frozenset, num_buckets: int
                    ) -> Iterator[tuple[bytes, int, int]]:
    """(frame, video, valid) of ranks [lo, hi) of a bucket, in (key, example) order,
    streamed: from one sorted bucket file (group) by its index; from several spilled
    files (spill) by merging their keys from the bucket's start, one open file each.
    Never a whole bucket in memory, and no frame is parsed: it goes to the shard as the
    sorted file holds it, its video and valid frames (the window table's) beside it."""
    has_dropped = any(bucket_of(k, num_buckets) == segment.bucket for k in dropped)
    if len(segment.files) == 1 and not has_dropped:
        (span,) = segment.files
        yield from _counted(SortedSlice(span.path, span.first + segment.lo,
                                        span.first + segment.hi))
        return
    allow_open_files(len(segment.files) + 64)
    slices = [SortedSlice(s.path, s.first, s.first + s.count) for s in segment.files]
    frames = [_counted(piece) for piece in slices]
    merged = heapq.merge(*([(key, i) for key in piece.keys]
                           for i, piece in enumerate(slices)))
    kept = (entry for key, entry in _in_order(merged, frames) if key not in dropped)
    yield from itertools.islice(kept, segment.lo, segment.hi)


def _in_order(merged: Iterator[tuple[int, int]],
              frames: list[Iterator[tuple[bytes, int, int]]]
              ) -> Iterator[tuple[int, tuple[bytes, int, int]]]:
    """(key, (frame, video, valid)) in (key, example) order, from the files' keys merged
    as (key, file): each file's next frame in turn. Records of one key from several files
    (a 64-bit hash collision; duplicate ids are dropped) are put in order of their
    examples' bytes, as one sort of them all would."""
    for key, group in itertools.groupby(merged, key=lambda entry: entry[0]):
        tied = [next(frames[file]) for _, file in group]
        if len(tied) > 1:
            tied.sort(key=lambda entry: entry[0][HEADER_BYTES:-FOOTER_BYTES])
        for entry in tied:
            yield key, entry


def _counted(piece: SortedSlice) -> Iterator[tuple[bytes, int, int]]:
    """A sorted slice's (frame, video, valid), counting the temp bytes a shard task
    reads: its index lookup and its frames."""
    read = piece.lookup_bytes
    try:
        for frame, video, valid in zip(piece.frames(), piece.videos, piece.valid,
                                            strict=True):
            read += len(frame)
            yield frame, video, valid
    finally:   # once a slice, however far it was read: a counter's inc is not free
        progress.counter("temp_bytes_read").inc(read)


class WriteShard(beam.DoFn):
    """A shard task -> its shard, its offset index (uncompressed shards) and its window
    table (readers.format.window_table), written in the output directory."""

    def __init__(self, run: RunDir, compression: str, num_buckets: int):
        self._run, self._output_dir, self._compression = run, run.output_dir, compression
        self._num_buckets = num_buckets

    def process(self, task: ShardTask):
        name = self._run.shard_name(task.split, task.index, task.num_shards, self._compression)
        # Written in place: a retried task rewrites the same bytes, and no reader looks
        # at a shard before dataset.json lists it.
        path = paths.join(self._output_dir, name)
        offsets, videos, valid = [0], [], []
        with streams.create(path, self._compression) as f:
            for segment in task.segments:
                for frame, video, frames in segment_frames(segment, task.dropped,
                                                           self._num_buckets):
                    f.write(frame)
                    offsets.append(offsets[-1] + len(frame))
                    videos.append(video)
                    valid.append(frames)
        writeback.start_writeback(path)
        progress.counter("shard_bytes_written").inc(offsets[-1])
        yield write_side_files(self._output_dir, task.split, name, offsets, videos, valid,
                               self._compression)


def write_side_files(output_dir: str, split: str, name: str, offsets: list[int],
                     videos: list[int], valid: list[int], compression: str) -> SplitShard:
    """A shard's side files (readers.format.writer.side_files: `offsets`, where each of
    its frames starts, then its end; its records' video hashes and valid frames), written
    beside it in `output_dir`; what the commit lists of it."""
    shard, files = writer.side_files(name, offsets, videos, valid, compression)
    for file, data in files.items():
        with streams.create(paths.join(output_dir, file)) as f:
            f.write(data)
    return SplitShard(split, shard)


def list_shards(tasks: list[ShardTask], run: RunDir, compression: str) -> list[ShardTask]:
    """List the shards (their indexes and tables too) in the run folder before any is
    written, so that a rerun after a kill can tell them from foreign files."""
    names = [run.shard_name(t.split, t.index, t.num_shards, compression) for t in tasks]
    run.list_shards(names + [data_format.table_name(n) for n in names]
                    + ([data_format.index_name(n) for n in names]
                       if compression == "none" else []))
    return tasks


class WriteShuffledShards(beam.PTransform):
    """PCollection[KeyedExample] -> PCollection[SplitShard], written to the run's
    output directory, in `config.mode`.

    `dropped` is a singleton side input: per split, the keys of windows to leave out.
    """

    def __init__(self, run: RunDir, config: ShuffleConfig, dropped):
        super().__init__()
        if config.mode not in SHUFFLE_MODES or config.mode == "place":
            raise ValueError(f"shuffle mode must be spill or group (place: shuffle/place.py's "
                             f"PlanShards), got {config.mode!r}")
        self._run, self._config, self._dropped = run, config, dropped

    def expand(self, examples):
        config = self._config
        return (shard_tasks(examples, self._run, config, self._dropped)
                | "WriteShards" >> beam.ParDo(
                    WriteShard(self._run, config.compression, config.num_buckets)))


def shard_tasks(examples, run: RunDir, config: ShuffleConfig, dropped,
                frame_bytes: Callable[[bytes], int] = example_frame_bytes):
    """PCollection[KeyedExample] -> the PCollection of the run's ShardTasks, each a
    shard's records in sorted files (spill mode, `config.mode` "spill" or "place", or
    group mode), the shards listed in the run folder first. `frame_bytes`: the bytes a
    record's example takes in a shard (planned records hold the size of the frame they
    stand for)."""
    temp = run.temp_dir
    if config.mode == "group":
        # a record crosses the shuffle as a plain tuple: Beam's coder spends twice the
        # time on a NamedTuple (12 us against 6 a window of 80 KB) and writes its type's
        # name with each; the bucket's writer unpacks it as it would the record
        files = (examples
                 | "KeyByBucket" >> beam.Map(lambda e: (
                     (e[0], bucket_of(e[1].key, config.num_buckets)), tuple(e[1])))
                 | "GroupBuckets" >> beam.GroupByKey()
                 | "WriteBuckets" >> beam.ParDo(_WriteBucket(temp, config.bucket_bytes)))
    else:
        files = examples | "Spill" >> beam.ParDo(
            _Spill(temp, config.num_buckets, config.spill_bytes, frame_bytes))
    return (
        files
        | "PlanShards" >> ApplyToAll(
            lambda gathered, dropped: plan_shards(
                gathered, config.splits, config.num_buckets, config.num_shards,
                config.shard_bytes, dropped), dropped)
        | "ListShards" >> beam.Map(list_shards, run, config.compression)
        | "SplitTasks" >> beam.FlatMap(lambda tasks: tasks)
        | "SpreadShards" >> beam.Reshuffle())
