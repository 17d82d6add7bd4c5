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
import math
import uuid
from typing import Iterable, NamedTuple, Optional

import apache_beam as beam
from apache_beam.io.filesystem import CompressionTypes
from apache_beam.io.filesystems import FileSystems
from apache_beam.transforms.window import GlobalWindow
from apache_beam.utils.timestamp import MIN_TIMESTAMP
from apache_beam.utils.windowed_value import WindowedValue

from beam_jobs.examples import KeyedExample
from beam_jobs.tfrecord_files import read_tfrecords, write_tfrecord
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
    """--num_shards, or enough shards of about `shard_bytes`; never more than windows."""
    wanted = num_shards if num_shards else math.ceil(nbytes / shard_bytes)
    return max(1, min(wanted, windows))


def plan_shards(bucket_files: list[BucketFile], splits: Iterable[str],
                num_shards: Optional[int], shard_bytes: int) -> Iterable[ShardTask]:
    """Cut each split's key order into shards whose counts differ by at most one."""
    by_split: dict[str, dict[int, list[BucketFile]]] = collections.defaultdict(
        lambda: collections.defaultdict(list))
    for bf in bucket_files:
        by_split[bf.split][bf.bucket].append(bf)
    for split in splits:
        buckets = sorted(by_split[split].items())
        counts = [sum(bf.count for bf in files) for _, files in buckets]
        total = sum(counts)
        if not total:
            continue
        nbytes = sum(bf.nbytes for _, files in buckets for bf in files)
        n = num_shards_for(total, nbytes, num_shards, shard_bytes)
        starts = [0]
        for count in counts:
            starts.append(starts[-1] + count)
        for i in range(n):
            lo, hi = i * total // n, (i + 1) * total // n
            segments = tuple(
                (tuple(sorted(bf.path for bf in files)), max(lo - first, 0), min(hi - first, count))
                for (_, files), first, count in zip(buckets, starts, counts)
                if first < hi and first + count > lo)
            yield ShardTask(split, i, n, segments)


def _sorted_bucket(files: Iterable[str]) -> list[bytes]:
    """All records of one bucket, in key order (ties by example bytes)."""
    records = []
    for path in files:
        for _, record in read_tfrecords(path):
            if isinstance(record, ValueError):
                raise record  # a temp file of this run is broken: fail, let the runner retry
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
                for record in _sorted_bucket(files)[lo:hi]:
                    write_tfrecord(f, record[_KEY_BYTES:])
                    count += 1
        yield WrittenShard(task.split, task.index, name, count)


class WriteShuffledShards(beam.PTransform):
    """PCollection[KeyedExample] -> PCollection[WrittenShard], written to `output_dir`.

    Each split gets `num_shards` shards, or, when None, one per `shard_bytes` of
    examples; `num_buckets` sets the temp buckets per split (each is sorted in memory).
    """

    def __init__(self, output_dir: str, temp_dir: str, splits: Iterable[str],
                 compression: str, num_shards: Optional[int], shard_bytes: int,
                 num_buckets: int, spill_bytes: int = 64 << 20):
        super().__init__()
        self._output_dir, self._temp_dir = output_dir, temp_dir
        self._splits, self._compression = list(splits), compression
        self._num_shards, self._shard_bytes = num_shards, shard_bytes
        self._num_buckets, self._spill_bytes = num_buckets, spill_bytes

    def expand(self, examples):
        return (
            examples
            | "SpillToBuckets" >> beam.ParDo(
                _SpillToBuckets(self._temp_dir, self._num_buckets, self._spill_bytes))
            | "GatherBucketFiles" >> beam.combiners.ToList()
            | "PlanShards" >> beam.FlatMap(plan_shards, self._splits, self._num_shards,
                                           self._shard_bytes)
            | "SpreadShards" >> beam.Reshuffle()
            | "WriteShards" >> beam.ParDo(
                _WriteShard(self._output_dir, self._compression)))
