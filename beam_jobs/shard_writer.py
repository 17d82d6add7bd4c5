"""Globally shuffled, balanced, deterministic TFRecord shards in bounded memory.

FnApiRunner holds a GroupByKey's whole input in memory, so full examples never pass
through one. Instead (the idea of TFDS's writer and on-disk shuffler):

1. Spill: each worker appends its examples, prefixed by their 8-byte big-endian key,
   to temp files per (split, bucket), where bucket b holds the keys in
   [b * 2**64 / B, (b + 1) * 2**64 / B). Only (bucket, file, count, bytes) rows move on.
2. Plan: those small rows, gathered, give each bucket's count, so each element's rank
   in its split's key order: shard i of N takes ranks [i*n//N, (i+1)*n//N).
3. Write: one task per shard reads the buckets overlapping its rank range, one bucket
   at a time, sorts it by key and writes its slice. Peak memory is one bucket.

The order depends only on the keys (ties broken by the example bytes), so the shards
are byte-identical whatever the runner, the bundling and the number of workers.
"""
from __future__ import annotations

import collections
import dataclasses
import math
import uuid
from typing import Iterable, Mapping, NamedTuple, Optional

import apache_beam as beam
from apache_beam.io.filesystem import CompressionTypes
from apache_beam.io.filesystems import FileSystems
from apache_beam.transforms.window import GlobalWindow
from apache_beam.utils.timestamp import MIN_TIMESTAMP
from apache_beam.utils.windowed_value import WindowedValue

from beam_jobs.examples import KeyedExample
from beam_jobs.output_dir import RunDir
from beam_jobs.tfrecords import Lost, read_frame, write_tfrecord
from readers import spec as spec_lib

_KEY_BYTES = 8
_COMPRESSION = {"none": CompressionTypes.UNCOMPRESSED, "gzip": CompressionTypes.GZIP}


class BucketFile(NamedTuple):
    split: str
    bucket: int
    path: str
    count: int
    nbytes: int


class ShardTask(NamedTuple):
    split: str
    index: int
    num_shards: int
    segments: tuple[tuple[tuple[str, ...], int, int], ...]  # (bucket's files, lo, hi)
    dropped: frozenset = frozenset()                         # keys not to write


@dataclasses.dataclass(frozen=True)
class ShardConfig:
    """How a run's examples become shards."""
    splits: tuple[str, ...]
    compression: str = "none"
    num_shards: Optional[int] = None     # per split; None: one per `shard_bytes`
    shard_bytes: int = 200 << 20
    num_buckets: int = 1                 # temp buckets per split, each sorted in memory
    spill_bytes: int = 64 << 20          # what one worker buffers before it spills


class WrittenShard(NamedTuple):
    split: str
    index: int
    file: str
    examples: int


def bucket_of(key: int, num_buckets: int) -> int:
    return key * num_buckets >> 64


class _SpillToBuckets(beam.DoFn):
    """Buffers a bundle's examples per bucket and spills them to temp files."""

    def __init__(self, temp_dir: str, num_buckets: int, spill_bytes: int):
        self._temp_dir, self._num_buckets, self._spill_bytes = temp_dir, num_buckets, spill_bytes

    def start_bundle(self):
        self._buffers: dict[tuple[str, int], list[bytes]] = collections.defaultdict(list)
        self._buffered = 0

    def process(self, element: KeyedExample):
        record = element.key.to_bytes(_KEY_BYTES, "big") + element.example
        self._buffers[(element.split, bucket_of(element.key, self._num_buckets))].append(record)
        self._buffered += len(record)
        if self._buffered >= self._spill_bytes:
            yield from self._spill()

    def finish_bundle(self):
        for bucket_file in self._spill():
            yield WindowedValue(bucket_file, MIN_TIMESTAMP, [GlobalWindow()])

    def _spill(self) -> Iterable[BucketFile]:
        spill_id = uuid.uuid4().hex
        for (split, bucket), records in sorted(self._buffers.items()):
            path = FileSystems.join(self._temp_dir, split, f"{bucket:05d}", f"{spill_id}.rec")
            with FileSystems.create(path, compression_type=CompressionTypes.UNCOMPRESSED) as f:
                for record in records:
                    write_tfrecord(f, record)
            yield BucketFile(split, bucket, path, len(records), sum(map(len, records)))
        self._buffers.clear()
        self._buffered = 0


def num_shards_for(windows: int, nbytes: int, num_shards: Optional[int],
                   shard_bytes: int) -> int:
    """--num_shards, or enough shards of about `shard_bytes`; never more than windows,
    nor than shard names can number."""
    wanted = num_shards if num_shards else math.ceil(nbytes / shard_bytes)
    return max(1, min(wanted, windows, spec_lib.MAX_SHARDS))


def plan_shards(bucket_files: list[BucketFile], config: ShardConfig,
                dropped: Mapping[str, frozenset]) -> Iterable[ShardTask]:
    """Cut each split's key order into shards whose counts differ by at most one.

    `dropped`: per split, the keys of windows that must not be written (the windows of
    videos whose id came more than once), left out of the ranks.
    """
    by_split: dict[str, dict[int, list[BucketFile]]] = collections.defaultdict(
        lambda: collections.defaultdict(list))
    for bf in bucket_files:
        by_split[bf.split][bf.bucket].append(bf)
    for split in config.splits:
        drop = dropped.get(split, frozenset())
        dropped_in = collections.Counter(bucket_of(k, config.num_buckets) for k in drop)
        buckets = sorted(by_split[split].items())
        counts = [sum(bf.count for bf in files) - dropped_in[b] for b, files in buckets]
        total = sum(counts)
        if not total:
            continue
        nbytes = sum(bf.nbytes for _, files in buckets for bf in files)
        n = num_shards_for(total, nbytes, config.num_shards, config.shard_bytes)
        starts = [0]
        for count in counts:
            starts.append(starts[-1] + count)
        for i in range(n):
            lo, hi = i * total // n, (i + 1) * total // n
            segments = tuple(
                (tuple(sorted(bf.path for bf in files)), max(lo - first, 0), min(hi - first, count))
                for (_, files), first, count in zip(buckets, starts, counts)
                if first < hi and first + count > lo)
            overlapping = {b for (b, _), first, count in zip(buckets, starts, counts)
                           if first < hi and first + count > lo}
            yield ShardTask(split, i, n, segments, frozenset(
                k for k in drop if bucket_of(k, config.num_buckets) in overlapping))


def _record_shard_names(tasks: list[ShardTask], run: RunDir, compression: str
                        ) -> list[ShardTask]:
    """List the shards in the run folder before any is written, so that a rerun after a
    kill can tell them from foreign files."""
    run.record_shards(spec_lib.shard_name(t.split, t.index, t.num_shards, compression)
                      for t in tasks)
    return tasks


def _sorted_bucket(files: Iterable[str], dropped: frozenset) -> list[bytes]:
    """All records of one bucket in key order (ties by example bytes), but the dropped."""
    records = []
    for path in files:
        with FileSystems.open(path, compression_type=CompressionTypes.UNCOMPRESSED) as f:
            while (record := read_frame(f)) is not None:
                if isinstance(record, Lost):  # a temp file of this run: let the runner retry
                    raise OSError(f"{path}: {record.reason}")
                if int.from_bytes(record[:_KEY_BYTES], "big") not in dropped:
                    records.append(record)
    records.sort()
    return records


class _WriteShard(beam.DoFn):
    def __init__(self, output_dir: str, compression: str):
        self._output_dir, self._compression = output_dir, compression

    def process(self, task: ShardTask):
        name = spec_lib.shard_name(task.split, task.index, task.num_shards, self._compression)
        # Written in place: a retried task rewrites the same bytes, and no reader looks
        # at a shard before dataset.json lists it.
        path = FileSystems.join(self._output_dir, name)
        count = 0
        with FileSystems.create(path, compression_type=_COMPRESSION[self._compression]) as f:
            for files, lo, hi in task.segments:
                for record in _sorted_bucket(files, task.dropped)[lo:hi]:
                    write_tfrecord(f, record[_KEY_BYTES:])
                    count += 1
        yield WrittenShard(task.split, task.index, name, count)


class WriteShuffledShards(beam.PTransform):
    """PCollection[KeyedExample] -> PCollection[WrittenShard], written to the run's
    output directory.

    `dropped` is a singleton side input: per split, the keys of windows to leave out.
    """

    def __init__(self, run: RunDir, config: ShardConfig, dropped):
        super().__init__()
        self._run, self._config, self._dropped = run, config, dropped

    def expand(self, examples):
        config = self._config
        return (
            examples
            | "SpillToBuckets" >> beam.ParDo(
                _SpillToBuckets(self._run.temp_dir, config.num_buckets, config.spill_bytes))
            | "GatherBucketFiles" >> beam.combiners.ToList()
            | "PlanShards" >> beam.Map(lambda files, dropped: list(
                plan_shards(files, config, dropped)), self._dropped)
            | "RecordShardNames" >> beam.Map(_record_shard_names, self._run, config.compression)
            | "SplitTasks" >> beam.FlatMap(lambda tasks: tasks)
            | "SpreadShards" >> beam.Reshuffle()
            | "WriteShards" >> beam.ParDo(
                _WriteShard(self._run.output_dir, config.compression)))
