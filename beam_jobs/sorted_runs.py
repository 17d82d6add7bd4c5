"""Run files: records in sorted order, with an index of their offsets at the end.

A run is what the shuffle writes to temp storage: a spill of one worker's buffer (spill
mode) or one whole bucket (group mode), its records already in key order. The layout is
TFRecord framing (so every record is CRC-checked when read back), then the index:

    record 0 ... record n-1 | offset of record 0 ... n-1 (uint64 LE) | n (uint64 LE) | MAGIC

so a reader finds records [i, j) with two small reads at the end of the file and then
reads exactly their bytes: a shard task streams the slice it needs, never loads a bucket,
and reads no byte it does not write.

`sort_bounded` sorts any number of records in about a given budget of memory: it spills
sorted chunks to run files on the machine's local disk and merges them as streams.
"""
from __future__ import annotations

import heapq
import os
import struct
import tempfile
from typing import Callable, Iterable, Iterator, NamedTuple

from apache_beam.io.filesystem import CompressionTypes
from apache_beam.io.filesystems import FileSystems

from beam_jobs import storage
from readers.format.tfrecord import Lost, frame, read_frame

MAGIC = b"VWSRUN01"
_ENTRY = struct.Struct("<Q")
_TRAILER = struct.Struct("<Q8s")
# What read_run reads to find a slice besides the slice's frames, as the job's
# temp_bytes_read counter counts it: the trailer and one index entry (the slice's other
# entries, 8 bytes a record, are left out of that count).
LOOKUP_BYTES = _TRAILER.size + _ENTRY.size


class Written(NamedTuple):
    """What `write_run` wrote."""
    records: int
    payload: int      # bytes of the records themselves
    size: int         # bytes of the file: the records' frames, the index and the trailer


def write_run(path: str, records: Iterable[bytes]) -> Written:
    """Write sorted `records` as a run file."""
    offsets, at, payload = [], 0, 0
    with FileSystems.create(path, compression_type=CompressionTypes.UNCOMPRESSED) as f:
        for record in records:
            data = frame(record)
            f.write(data)
            offsets.append(at)
            at += len(data)
            payload += len(record)
        f.write(struct.pack(f"<{len(offsets)}Q", *offsets))
        f.write(_TRAILER.pack(len(offsets), MAGIC))
    return Written(len(offsets), payload, at + _ENTRY.size * len(offsets) + _TRAILER.size)


def read_run(path: str, start: int, stop: int) -> Iterator[bytes]:
    """Records [start, stop) of a run file: its trailer, the index entries of the slice,
    then exactly the slice's bytes (on GCS: a few ranged requests, nothing more read)."""
    if stop <= start:
        return
    size = storage.size(path)
    count, magic = _TRAILER.unpack(storage.read_range(path, size - _TRAILER.size, size))
    if magic != MAGIC or stop > count:
        raise OSError(f"{path} is not a run file of {stop} records or more")
    index = size - _TRAILER.size - _ENTRY.size * count
    entries = storage.read_range(path, index + _ENTRY.size * start,
                                 index + _ENTRY.size * min(stop + 1, count))
    first, = _ENTRY.unpack_from(entries)
    end = (_ENTRY.unpack_from(entries, _ENTRY.size * (stop - start))[0] if stop < count
           else index)
    with storage.open_range(path, first, end) as f:
        for _ in range(stop - start):
            record = read_frame(f)
            if record is None or isinstance(record, Lost):  # a temp file of this run:
                raise OSError(f"{path}: {record.reason if record else 'ends early'}")
            yield record


def sort_bounded(records: Iterable[bytes], budget: int,
                 sorting: Callable[[int], None] = lambda nbytes: None) -> Iterator[bytes]:
    """`records` in sorted order, never holding much more than `budget` bytes of them:
    sorted in memory when they fit; else sorted `budget` at a time, each chunk written as
    a run file to this machine's local disk (a temp directory, removed when the
    iterator ends or is closed), and the chunks merged as streams (heapq.merge, one
    record and one open file per chunk). `sorting(nbytes)` is told each in-memory sort's
    bytes."""
    chunk: list[bytes] = []
    held = 0
    with tempfile.TemporaryDirectory(prefix="sort-") as local:
        spilled: list[tuple[str, int]] = []
        for record in records:
            chunk.append(record)
            held += len(record)
            if held >= budget:
                sorting(held)
                chunk.sort()
                path = os.path.join(local, f"{len(spilled)}.run")
                spilled.append((path, write_run(path, chunk).records))
                chunk, held = [], 0
        sorting(held)
        chunk.sort()
        allow_open_files(len(spilled) + 64)
        yield from heapq.merge(chunk, *(read_run(path, 0, count) for path, count in spilled))


def allow_open_files(wanted: int) -> None:
    """Raise this process's soft limit of open files when a merge needs more (a spill run
    per 32 MB of a local run's windows: 3,200 at 100 GB, over the usual 1,024)."""
    try:
        import resource
    except ImportError:  # not on POSIX
        return
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft != resource.RLIM_INFINITY and soft < wanted:
        resource.setrlimit(resource.RLIMIT_NOFILE, (
            wanted if hard == resource.RLIM_INFINITY else min(wanted, hard), hard))
