"""The shuffle's data streamed to and from storage, local disk or GCS: a sorted file or a
shard written in large calls (`create`), and slices of a sorted file read by range
(`size`, `read_range`, `open_range`), no more than asked."""
from __future__ import annotations

import io
import os
from typing import BinaryIO

from apache_beam.io.filesystem import CompressionTypes
from apache_beam.io.filesystems import FileSystems

from beam_jobs.core import paths, storage

WRITE_BUFFER = 256 * 1024
_COMPRESSION = {"none": CompressionTypes.UNCOMPRESSED, "gzip": CompressionTypes.GZIP}


def create(path: str, compression: str = "none") -> BinaryIO:
    """A new file to stream to (`compression`: "none" or "gzip", a dataset's), its local
    folders made: Beam's writer on GCS or for gzip; otherwise a local file that writes
    WRITE_BUFFER a system call. Python's default buffer (8 KB)
    passes a larger write straight through, so a window of 80 KB costs two calls (its
    framing's bytes, then itself); at 256 KB a call the latent job spent 0.4-0.6 s less
    CPU, most of it system time (docs/benchmarks.md). Far larger calls cost more: 4 MB
    ones twice the system time here."""
    if paths.is_remote(path) or compression != "none":
        return FileSystems.create(path, compression_type=_COMPRESSION[compression])
    os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
    return open(path, "wb", buffering=WRITE_BUFFER)


RANGE_CHUNK = 8 << 20   # bytes per ranged GCS request when streaming a slice


def size(path: str) -> int:
    if storage.is_gcs(path):
        blob = storage.gcs_blob(path)
        found = blob.bucket.get_blob(blob.name)
        if found is None:
            raise FileNotFoundError(path)
        return int(found.size)
    return os.path.getsize(path)


def read_range(path: str, start: int, end: int) -> bytes:
    """Bytes [start, end) of a file: on GCS one ranged request, no more than asked."""
    if end <= start:
        return b""
    if storage.is_gcs(path):
        return storage.gcs_blob(path).download_as_bytes(start=start, end=end - 1)
    with open(path, "rb") as f:
        f.seek(start)
        return f.read(end - start)


class _GcsRange(io.RawIOBase):
    """Bytes [start, end) of a GCS object, fetched RANGE_CHUNK at a time on demand."""

    def __init__(self, path: str, start: int, end: int):
        self._path, self._at, self._end = path, start, end

    def readable(self) -> bool:
        return True

    def readinto(self, buffer) -> int:
        size = min(len(buffer), self._end - self._at)
        if size <= 0:
            return 0
        data = read_range(self._path, self._at, self._at + size)
        buffer[:len(data)] = data
        self._at += len(data)
        return len(data)


def open_range(path: str, start: int, end: int) -> BinaryIO:
    """A reader of bytes [start, end) of a file. On GCS it requests exactly that range,
    RANGE_CHUNK at a time (a seekable GCS reader fetches 16 MB past any position, which
    a shard task would pay at the end of every slice it reads)."""
    if storage.is_gcs(path):
        return io.BufferedReader(_GcsRange(path, start, end), buffer_size=RANGE_CHUNK)
    f = open(path, "rb")
    f.seek(start)
    return f
