"""The window table beside a shard: per record, its video and its valid frames.

What a reader selects by (readers/select.py) without reading a record: for record i of
the shard, the 64-bit hash of its video id (`video_hash`) and the number of its mask's
1s (its real frames: neither padding nor a bad frame). The job writes one table per
shard as it writes the shard (`encode`), format version 6 on; readers load a split's
tables when a selection opens (`decode`), and `readers.inspect --verify` checks every
entry against the records it parses.

A table belongs to one shard, and says which (format 7 on): its file name without its
run id (so that the tables of two runs of the same inputs are the same bytes, as their
shards are; the table's own name carries the run id), its record count and the CRC32C
of its offset index (the index's text, which changes with the length of any record; a
gzip shard's is the index its records would have uncompressed). dataset.json gives
each table's own CRC (`table_crc32c`), so that a table swapped with another of the same
length (of another generation too), or edited with its CRC made anew, is told when a
reader opens it, without reading a shard; `--verify` checks the index's CRC and every
entry.
Binary, little-endian:

    bytes 0-7    magic b"VWSTAB02" (b"VWSTAB01": format 6, without bytes 24 on)
    bytes 8-15   n, the shard's records (uint64)
    bytes 16-19  CRC32C of bytes [24, end) (uint32): dataset.json's `table_crc32c`
    byte 20      w, the bytes of one valid count: 1, 2 or 4
    bytes 21-23  zero
    bytes 24-27  CRC32C of the shard's offset index (uint32)
    bytes 28-29  k, the bytes of the shard's name (uint16)
    bytes 30-31  zero
    bytes 32-    the shard's file name without its run id (UTF-8), zero-padded to a
                 multiple of 8 bytes
    then         n video hashes (uint64), then n valid counts (uint8, uint16 or uint32)

About 9 bytes a window for windows of up to 255 frames: 9 MB for a million windows. The
table is data: `decode` checks its size, counts, owner and CRCs before anyone trusts it,
and says what is wrong in one line naming the table; a reader reads no more of a file
than `largest` bytes (readers/shards.py: `read_bounded`).
"""
from __future__ import annotations

import hashlib
import struct
from typing import Iterable, NamedTuple, Optional, Sequence

import google_crc32c
import numpy as np

from readers.format.names import without_run_id
from readers.format.splits import Shard

MAGIC = b"VWSTAB02"
MAGIC_6 = b"VWSTAB01"                     # format 6: no owner
_HEADER = struct.Struct("<8sQIB3s")      # magic, records, crc, width, zeros
_OWNER = struct.Struct("<IH2s")           # the index's CRC, the name's bytes, zeros
HEADER_BYTES = _HEADER.size              # 24
_VIDEO = np.dtype("<u8")
_WIDTHS: dict[int, np.dtype] = {1: np.dtype("u1"), 2: np.dtype("<u2"), 4: np.dtype("<u4")}


class TableError(ValueError):
    """A window table no reader can trust: its name and what is wrong, in one line."""


class Table(NamedTuple):
    """A table's entries, and what it says of its shard's index (None: a format-6 table)."""
    videos: np.ndarray          # uint64 [records]: each record's `video_hash`
    valid: np.ndarray           # [records]: each record's valid frames
    index_crc32c: Optional[int]


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


def _owner_bytes(named: str) -> int:
    """The bytes of the owner part (bytes 24 on, before the entries) naming `named`."""
    return _OWNER.size + -(-len(named.encode("utf-8")) // 8) * 8


def largest(shard: Shard) -> int:
    """The most bytes the table of `shard` (its dataset.json entry) can have: what a
    reader reads of it at most."""
    return (HEADER_BYTES + _owner_bytes(without_run_id(shard.file))
            + (_VIDEO.itemsize + 4) * shard.examples)


def encode(videos: Sequence[int], valid: Sequence[int], shard_file: str, index: bytes) -> bytes:
    """The table of shard `shard_file`, whose record i is of video `videos[i]` (a
    `video_hash`) with `valid[i]` real frames, and whose offset index is `index` (its
    text, readers.format.index.encode)."""
    if len(videos) != len(valid):
        raise ValueError(f"{len(videos)} video hashes for {len(valid)} valid counts")
    counts = np.asarray(valid, np.int64)
    if counts.size and counts.min() < 0:
        raise ValueError("a negative valid count")
    width = _width(int(counts.max()) if counts.size else 0)
    named = without_run_id(shard_file)
    owner = _OWNER.pack(google_crc32c.value(index), len(named.encode("utf-8")), b"\0" * 2)
    owner += named.encode("utf-8").ljust(_owner_bytes(named) - _OWNER.size, b"\0")
    body = (owner + np.asarray(videos, np.uint64).astype(_VIDEO).tobytes()
            + counts.astype(_WIDTHS[width]).tobytes())
    return _HEADER.pack(MAGIC, len(counts), google_crc32c.value(body), width,
                        b"\0" * 3) + body


def crc32c(data: bytes) -> int:
    """The CRC a table's header holds (dataset.json's `table_crc32c`), as written."""
    return _HEADER.unpack_from(data)[2]


def decode(data: bytes, shard: Shard, window: int) -> Table:
    """The table of `shard` (its dataset.json entry), checked: TableError naming it when
    it is not a table, is cut short or added to, belongs to another shard (by its name
    or record count), fails its CRC, is not the one dataset.json gives
    (`table_crc32c`; a format-6 table where it gives none), or counts more valid frames
    than a window has (`window`)."""
    name = shard.table or "a window table"
    if len(data) < HEADER_BYTES:
        raise TableError(f"{name}: {len(data)} bytes, too short for a window table")
    magic, count, crc, width, zeros = _HEADER.unpack_from(data)
    if magic not in (MAGIC, MAGIC_6):
        raise TableError(f"{name}: not a window table (it starts {magic!r}, not {MAGIC!r})")
    if width not in _WIDTHS or zeros != b"\0" * 3:
        raise TableError(f"{name}: a header this reader does not know (valid counts of "
                         f"{width} bytes)")
    owner = _owner(data, name) if magic == MAGIC else None
    start = HEADER_BYTES + (0 if owner is None else _owner_bytes(owner[1]))
    size = start + (_VIDEO.itemsize + width) * count
    if len(data) != size:
        raise TableError(f"{name}: {len(data)} bytes, a table of {count} records has {size}")
    if owner is not None and owner[1] != without_run_id(shard.file):
        raise TableError(f"{name}: the table of shard {owner[1]!r}, not of {shard.file}")
    if count != shard.examples:
        raise TableError(f"{name}: a table of {count} records, dataset.json gives its shard "
                         f"{shard.examples}")
    if google_crc32c.value(np.frombuffer(data, np.uint8, offset=HEADER_BYTES)) != crc:
        raise TableError(f"{name}: fails its CRC: it is damaged")
    _check_listed(name, owner is not None, crc, shard.table_crc32c)
    videos = np.frombuffer(data, _VIDEO, count, start).astype(np.uint64, copy=False)
    valid = np.frombuffer(data, _WIDTHS[width], count, start + _VIDEO.itemsize * count)
    if valid.size and int(valid.max()) > window:
        at = int(np.argmax(valid > window))
        raise TableError(f"{name}: record {at} has {int(valid[at])} valid frames, more than "
                         f"the window's {window}")
    return Table(videos, valid, None if owner is None else owner[0])


def _owner(data: bytes, name: str) -> tuple[int, str]:
    """(the CRC of its shard's index, its shard's name without its run id) that a table
    of format 7 gives; TableError when they are not there."""
    if len(data) < HEADER_BYTES + _OWNER.size:
        raise TableError(f"{name}: {len(data)} bytes, too short for a window table")
    index_crc, length, zeros = _OWNER.unpack_from(data, HEADER_BYTES)
    named = data[HEADER_BYTES + _OWNER.size:HEADER_BYTES + _OWNER.size + length]
    try:
        shard_file = named.decode("utf-8")
    except UnicodeDecodeError:
        shard_file = ""
    if zeros != b"\0" * 2 or len(named) < length or not shard_file:
        raise TableError(f"{name}: a header this reader does not know (no shard's name)")
    return index_crc, shard_file


def _check_listed(name: str, owned: bool, crc: int, listed: Optional[int]) -> None:
    """TableError unless a table is the one dataset.json gives: its CRC `listed` there
    (from format 7 on; a format-6 table, without an owner, where dataset.json gives none)."""
    if listed is None and not owned:
        return
    if listed is None:
        raise TableError(f"{name}: a table of format 7, where dataset.json gives no CRC "
                         "for it")
    if not owned:
        raise TableError(f"{name}: a table of format 6, where dataset.json gives the CRC "
                         "of one of format 7")
    if crc != listed:
        raise TableError(f"{name}: not the table dataset.json gives its shard (its CRC is "
                         f"{crc:08x}, dataset.json says {listed:08x})")
