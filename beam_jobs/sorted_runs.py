"""Run files: records in sorted order, with an index of their offsets at the end.

A run is what the shuffle writes to temp storage: a spill of one worker's buffer (spill
mode) or one whole bucket (group mode), its records already in key order. The layout is
TFRecord framing (so every record is CRC-checked when read back), then the index:

    record 0 ... record n-1 | offset of record 0 ... n-1 (uint64 LE) | n (uint64 LE) | MAGIC

so a reader finds records [i, j) with two small reads at the end of the file and then
reads exactly their bytes: a shard task streams the slice it needs, never loads a bucket,
and reads no byte it does not write.
"""
from __future__ import annotations

import struct
from typing import Iterable, Iterator, NamedTuple

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
