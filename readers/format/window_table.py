"""The window table beside a shard: per record, its video and its valid frames.

What a reader selects by (readers/subset.py) without reading a record: for record i of
the shard, the 64-bit hash of its video id (`video_hash`) and the number of its mask's
1s (its real frames: neither padding nor a bad frame). The job writes one table per
shard as it writes the shard (`encode`), format version 6 on; readers load a split's
tables when a selection opens (`decode`), and `readers.inspect --verify` checks every
entry against the records it parses. Binary, little-endian:

    bytes 0-7    magic b"VWSTAB01"
    bytes 8-15   n, the shard's records (uint64)
    bytes 16-19  CRC32C of bytes [24, end) (uint32)
    byte 20      w, the bytes of one valid count: 1, 2 or 4
    bytes 21-23  zero
    then         n video hashes (uint64), then n valid counts (uint8, uint16 or uint32)

24 + 9n bytes for windows of up to 255 frames: 9 MB for a million windows. The table is
data: `decode` checks its size, counts and CRC before anyone trusts it, and says what
is wrong in one line naming the table.
"""
from __future__ import annotations

import hashlib
import struct
from typing import Iterable, Sequence

import google_crc32c
import numpy as np

MAGIC = b"VWSTAB01"
_HEADER = struct.Struct("<8sQIB3s")      # magic, records, crc, width, zeros
HEADER_BYTES = _HEADER.size              # 24
_VIDEO = np.dtype("<u8")
_WIDTHS: dict[int, np.dtype] = {1: np.dtype("u1"), 2: np.dtype("<u2"), 4: np.dtype("<u4")}


class TableError(ValueError):
    """A window table no reader can trust: its name and what is wrong, in one line."""


def video_hash(video_id: str) -> int:
    """The 64-bit hash of a video id that a window table holds (BLAKE2b, 8 bytes, of its
    UTF-8, read little-endian): the same in the job and in every reader."""
    return int.from_bytes(hashlib.blake2b(video_id.encode("utf-8", "surrogatepass"),
                                          digest_size=8).digest(), "little")


def video_hashes(video_ids: Iterable[str]) -> np.ndarray:
    """`video_hash` of each id, as a uint64 array."""
    return np.fromiter((video_hash(v) for v in video_ids), np.uint64)


def _width(largest: int) -> int:
    return next(w for w in (1, 2, 4) if largest < 1 << (8 * w))


def encode(videos: Sequence[int], valid: Sequence[int]) -> bytes:
    """The table of a shard whose record i is of video `videos[i]` (a `video_hash`) with
    `valid[i]` real frames."""
    if len(videos) != len(valid):
        raise ValueError(f"{len(videos)} video hashes for {len(valid)} valid counts")
    counts = np.asarray(valid, np.int64)
    if counts.size and counts.min() < 0:
        raise ValueError("a negative valid count")
    width = _width(int(counts.max()) if counts.size else 0)
    body = (np.asarray(videos, np.uint64).astype(_VIDEO).tobytes()
            + counts.astype(_WIDTHS[width]).tobytes())
    return _HEADER.pack(MAGIC, len(counts), google_crc32c.value(body), width,
                        b"\0" * 3) + body


def decode(data: bytes, name: str, records: int, window: int) -> tuple[np.ndarray, np.ndarray]:
    """(video hashes uint64 [records], valid counts [records]) of the table `name`,
    checked: TableError naming it when it is not a table, holds another number of
    records than dataset.json gives its shard (`records`), is cut short or added to, fails
    its CRC, or counts more valid frames than a window has (`window`)."""
    if len(data) < HEADER_BYTES:
        raise TableError(f"{name}: {len(data)} bytes, too short for a window table")
    magic, count, crc, width, zeros = _HEADER.unpack_from(data)
    if magic != MAGIC:
        raise TableError(f"{name}: not a window table (it starts {magic!r}, not {MAGIC!r})")
    if width not in _WIDTHS or zeros != b"\0" * 3:
        raise TableError(f"{name}: a header this reader does not know (valid counts of "
                         f"{width} bytes)")
    if count != records:
        raise TableError(f"{name}: a table of {count} records, dataset.json gives its shard "
                         f"{records}")
    size = HEADER_BYTES + (_VIDEO.itemsize + width) * records
    if len(data) != size:
        raise TableError(f"{name}: {len(data)} bytes, a table of {records} records has {size}")
    if google_crc32c.value(np.frombuffer(data, np.uint8, offset=HEADER_BYTES)) != crc:
        raise TableError(f"{name}: fails its CRC: it is damaged")
    videos = np.frombuffer(data, _VIDEO, records, HEADER_BYTES).astype(np.uint64, copy=False)
    valid = np.frombuffer(data, _WIDTHS[width], records,
                          HEADER_BYTES + _VIDEO.itemsize * records)
    if valid.size and int(valid.max()) > window:
        at = int(np.argmax(valid > window))
        raise TableError(f"{name}: record {at} has {int(valid[at])} valid frames, more than "
                         f"the window's {window}")
    return videos, valid
