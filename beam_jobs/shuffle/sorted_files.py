"""Sorted files: the shuffle's temp files. Records in sorted order, framed as a shard
will hold them, with an index of their keys and offsets at the end.

A sorted file is what the shuffle writes to temp storage: a spill of one worker's buffer
(spill mode) or one whole bucket (group mode), its records (readers.format.writer's
`WindowRecord`: key, example, video, valid; group mode's GroupByKey hands them on as
plain tuples of those fields, which this module unpacks alike) already in order.
(External sorting calls these "runs"; here a run is only ever one execution of the
job.) The layout:

    frame 0 ... frame n-1 | (key, offset, video, valid) of record 0 ... n-1 | n | MAGIC

(key, offset and video uint64 LE, valid uint32 LE). The video and valid columns are what
the shard's window table holds of each record (readers.format.window_table): they ride
with the key, so that a shard task writes the table without parsing a record.

Each frame is the example's TFRecord frame, byte for byte what its shard will hold. So a
shard task finds a slice from the index alone (two small reads at the end of the file),
merges sorted files by the keys there, and copies frames through, reading exactly the
slice's bytes: it never loads a bucket, and it neither parses, checksums nor frames a
record again (a frame is checksummed once, from the example in memory). A frame damaged
on the temp disk therefore reaches its shard with a CRC that fails in every reader and
in `readers.inspect --verify`, never as wrong data; a frame whose length header
disagrees with the index fails the task.

`sort_bounded` sorts any number of records in about a given budget of memory: it spills
sorted chunks to sorted files on the machine's local disk and merges them as streams.
"""
from __future__ import annotations

import heapq
import os
import struct
import tempfile
from typing import Callable, Iterable, Iterator, NamedTuple

import numpy as np

from beam_jobs.core import streams
from readers.format.tfrecord import (
    FRAME_OVERHEAD,
    HEADER_BYTES,
    Lost,
    footer,
    header,
    read_exactly,
    read_frame,
)
from readers.format.writer import WindowRecord

MAGIC = b"VWSSRT04"
_ENTRY = np.dtype([("key", "<u8"), ("offset", "<u8"), ("video", "<u8"), ("valid", "<u4")])
_TRAILER = struct.Struct("<Q8s")


class Written(NamedTuple):
    """What `write_sorted` wrote."""
    records: int
    frame_bytes: int  # bytes of the records' frames: what they take in a shard
    size: int         # bytes of the file: the frames, the index and the trailer


def write_sorted(path: str, records: Iterable[WindowRecord]) -> Written:
    """Write sorted `records` as a sorted file."""
    keys, offsets, videos, valid, at = [], [], [], [], 0
    with streams.create(path) as f:
        for key, example, video, frames in records:
            f.write(header(len(example)))   # three writes, no join: a window is not copied
            f.write(example)
            f.write(footer(example))
            keys.append(key)
            offsets.append(at)
            videos.append(video)
            valid.append(frames)
            at += len(example) + FRAME_OVERHEAD
        index = np.empty(len(keys), _ENTRY)
        index["key"], index["offset"], index["video"], index["valid"] = (
            keys, offsets, videos, valid)
        f.write(index.tobytes())
        f.write(_TRAILER.pack(len(keys), MAGIC))
    return Written(len(keys), at, at + index.nbytes + _TRAILER.size)


class SortedSlice:
    """Records [start, stop) of a sorted file: their keys, frame lengths, videos and valid
    counts, from two small reads of the file's end (on GCS: ranged requests, nothing more
    read), and then their frames, in order, from one stream of exactly their bytes."""

    def __init__(self, path: str, start: int, stop: int):
        self.path = path
        size = streams.size(path)
        count, magic = _TRAILER.unpack(streams.read_range(path, size - _TRAILER.size, size))
        if magic != MAGIC or not 0 <= start <= stop <= count:
            raise OSError(f"{path} is not a sorted file of {stop} records or more")
        index = size - _TRAILER.size - _ENTRY.itemsize * count
        entries = np.frombuffer(streams.read_range(
            path, index + _ENTRY.itemsize * start,
            index + _ENTRY.itemsize * min(stop + 1, count)), _ENTRY)
        self.lookup_bytes = entries.nbytes + _TRAILER.size
        self.keys: list[int] = entries["key"][:stop - start].tolist()
        self.videos: list[int] = entries["video"][:stop - start].tolist()
        self.valid: list[int] = entries["valid"][:stop - start].tolist()
        # where each frame starts, and where the last one ends
        offsets = entries["offset"].tolist()[:stop - start + 1] + (
            [index] if stop == count else [])
        self.begin, self.end = offsets[0], offsets[-1]
        self.lengths: list[int] = np.diff(offsets).tolist()

    def frames(self) -> Iterator[bytes]:
        """The slice's frames in order, each checked against its index entry."""
        if not self.lengths:
            return
        with streams.open_range(self.path, self.begin, self.end) as f:
            for length in self.lengths:
                data = read_exactly(f, length)
                if (len(data) != length
                        or data[:HEADER_BYTES] != header(length - FRAME_OVERHEAD)):
                    raise OSError(f"{self.path}: a frame at odds with the sorted file's index")
                yield data


def read_sorted(path: str, start: int, stop: int) -> Iterator[WindowRecord]:
    """Records [start, stop) of a sorted file, each
    frame's CRCs checked (sort_bounded's merge: the examples go on to be framed again)."""
    piece = SortedSlice(path, start, stop)
    with streams.open_range(path, piece.begin, piece.end) as f:
        for key, video, valid in zip(piece.keys, piece.videos, piece.valid, strict=True):
            example = read_frame(f)
            if example is None or isinstance(example, Lost):   # a temp file of this job's:
                raise OSError(f"{path}: {example.reason if example else 'ends early'}")
            yield WindowRecord(key, example, video, valid)


def sort_bounded(records: Iterable[WindowRecord], budget: int,
                 sorting: Callable[[int], None] = lambda nbytes: None
                 ) -> Iterator[WindowRecord]:
    """`records` in sorted order, never holding much more than `budget`
    bytes of examples: sorted in memory when they fit; else sorted `budget` at a time,
    each chunk written as a sorted file to this machine's local disk (a temp directory,
    removed when the iterator ends or is closed), and the chunks merged as streams
    (heapq.merge, one record and one open file per chunk). `sorting(nbytes)` is told
    each in-memory sort's bytes."""
    chunk: list[WindowRecord] = []
    held = 0
    with tempfile.TemporaryDirectory(prefix="sort-") as local:
        spilled: list[tuple[str, int]] = []
        for record in records:
            chunk.append(record)
            held += len(record[1])
            if held >= budget:
                sorting(held)
                chunk.sort()
                path = os.path.join(local, f"{len(spilled)}.sorted")
                spilled.append((path, write_sorted(path, chunk).records))
                chunk, held = [], 0
        sorting(held)
        chunk.sort()
        allow_open_files(len(spilled) + 64)
        yield from heapq.merge(chunk, *(read_sorted(path, 0, count) for path, count in spilled))


def allow_open_files(wanted: int) -> None:
    """Raise this process's soft limit of open files when a merge needs more (a spilled
    sorted file per 32 MB of a local run's windows: 3,200 at 100 GB, over the usual
    1,024)."""
    try:
        import resource
    except ImportError:  # not on POSIX
        return
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft != resource.RLIM_INFINITY and soft < wanted:
        resource.setrlimit(resource.RLIMIT_NOFILE, (
            wanted if hard == resource.RLIM_INFINITY else min(wanted, hard), hard))
