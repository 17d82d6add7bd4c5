"""The shard plan: which ranks of a split's key order each shard holds, and where those
records lie in the sorted files. Pure: small rows in, tasks out.

A split's shards hold its windows in key order, shard i of N the ranks [i*n//N,
(i+1)*n//N), so counts differ by at most one. Keys fall into buckets by range (bucket b
holds [b * 2**64 / B, (b + 1) * 2**64 / B)); each sorted file says how many records of
each bucket it holds and where, so a shard is a run of bucket segments.
"""
from __future__ import annotations

import bisect
import collections
import itertools
import math
from typing import Mapping, NamedTuple, Optional, Sequence

from readers import format as data_format
from readers.format.writer import shard_ranges


class BucketSpan(NamedTuple):
    """The records of one bucket in a sorted file: records [first, first + count),
    `nbytes` of frames."""
    bucket: int
    first: int
    # A field named count (index) hides tuple.count (tuple.index), which nothing here
    # calls; the names say what the fields hold.
    count: int  # type: ignore[assignment]
    nbytes: int


class SortedFile(NamedTuple):
    """A sorted file of one split and what each bucket has in it."""
    split: str
    path: str
    buckets: tuple[BucketSpan, ...]


class FileSpan(NamedTuple):
    """Records [first, first + count) of the sorted file at `path`."""
    path: str
    first: int
    count: int  # type: ignore[assignment]


class Segment(NamedTuple):
    """One bucket's share of a shard: ranks [lo, hi) of the bucket's sorted records, which
    lie in `files`."""
    bucket: int
    files: tuple[FileSpan, ...]
    lo: int
    hi: int


class ShardTask(NamedTuple):
    split: str
    index: int  # type: ignore[assignment]
    num_shards: int
    segments: tuple[Segment, ...]
    dropped: frozenset = frozenset()   # keys not to write, in this task's buckets
    split_records: int = 0             # the records of all the split's shards


class _Bucket(NamedTuple):
    """A bucket of one split: where its records lie and how many are kept."""
    bucket: int
    files: tuple[FileSpan, ...]
    kept: int        # its records less the dropped ones
    dropped: tuple[int, ...]


def bucket_of(key: int, num_buckets: int) -> int:
    return key * num_buckets >> 64


def num_shards_for(windows: int, nbytes: int, num_shards: Optional[int],
                   shard_bytes: int) -> int:
    """--num_shards, or enough shards of about `shard_bytes`; never more than windows,
    nor than shard names can number."""
    wanted = num_shards if num_shards else math.ceil(nbytes / shard_bytes)
    return max(1, min(wanted, windows, data_format.MAX_SHARDS))


def plan_shards(files: Sequence[SortedFile], splits: Sequence[str], num_buckets: int,
                num_shards: Optional[int], shard_bytes: int,
                dropped: Mapping[str, frozenset]) -> list[ShardTask]:
    """Cut each split's key order into shards (`num_shards` a split, or enough of about
    `shard_bytes`), whose counts differ by at most one.

    `dropped`: per split, the keys of windows that must not be written (the windows of
    videos whose id came more than once), left out of the ranks.

    Each shard finds its first bucket by bisection: the plan grows with buckets, shards
    and dropped keys, not with their product.
    """
    tasks = []
    for split in splits:
        mine = [f for f in files if f.split == split]
        buckets = _buckets(mine, dropped.get(split, frozenset()), num_buckets)
        total = sum(b.kept for b in buckets)
        if not total:
            continue
        nbytes = sum(span.nbytes for f in mine for span in f.buckets)
        n = num_shards_for(total, nbytes, num_shards, shard_bytes)
        ends = list(itertools.accumulate(b.kept for b in buckets))
        tasks += [ShardTask(split, i, n, *_segments(buckets, ends, lo, hi), total)
                  for i, (lo, hi) in enumerate(shard_ranges(total, n))]
    return tasks


def _buckets(files: list[SortedFile], dropped: frozenset, num_buckets: int) -> list[_Bucket]:
    """A split's buckets in key order, each with the file spans that hold it and its
    dropped keys; buckets with nothing kept are left out."""
    spans: dict[int, list[FileSpan]] = collections.defaultdict(list)
    for f in files:
        for span in f.buckets:
            spans[span.bucket].append(FileSpan(f.path, span.first, span.count))
    dropped_in: dict[int, list[int]] = collections.defaultdict(list)
    for key in dropped:
        dropped_in[bucket_of(key, num_buckets)].append(key)
    buckets = [_Bucket(b, tuple(sorted(spans[b])),
                       sum(s.count for s in spans[b]) - len(dropped_in[b]),
                       tuple(dropped_in[b]))
               for b in sorted(spans)]
    return [b for b in buckets if b.kept > 0]


def _segments(buckets: list[_Bucket], ends: list[int], lo: int, hi: int
              ) -> tuple[tuple[Segment, ...], frozenset]:
    """The segments of ranks [lo, hi) of the buckets' key order (`ends`: the rank after
    each bucket's last), and the dropped keys in their buckets."""
    segments: list[Segment] = []
    dropped: list[int] = []
    at = bisect.bisect_right(ends, lo)        # the first bucket that ends after lo
    while at < len(buckets) and ends[at] - buckets[at].kept < hi:
        bucket, first = buckets[at], ends[at] - buckets[at].kept
        segments.append(Segment(bucket.bucket, bucket.files, max(lo - first, 0),
                                min(hi - first, bucket.kept)))
        dropped += bucket.dropped
        at += 1
    return tuple(segments), frozenset(dropped)
