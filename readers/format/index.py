"""The offset index beside an uncompressed shard: where each record's frame starts.

One little-endian uint64 per record (the offset of its TFRecord frame), then the shard's
length: record i is the frame in [offsets[i], offsets[i + 1]). The job writes it with
`encode`; readers.numpy reads it with `decode` (one seek per record, so any window in any
order); `python -m readers.inspect --verify` checks it against its shard with `verify`. Offsets
are data too: `decode` checks them before a reader allocates or reads by them.
"""
from __future__ import annotations

import struct
from typing import BinaryIO, Optional, Sequence

import numpy as np

from readers.format.tfrecord import FRAME_OVERHEAD

_ENTRY = np.dtype("<u8")
_LENGTH = struct.Struct("<Q")   # a frame's length header, without its CRC


def encode(offsets: Sequence[int]) -> bytes:
    """An index's bytes: `offsets` of the frames, then the shard's length."""
    return struct.pack(f"<{len(offsets)}Q", *offsets)


def decode(data: bytes, name: str, records: int, shard_size: Optional[int] = None,
           min_frame: int = FRAME_OVERHEAD) -> np.ndarray:
    """The offsets an index holds (`records` + 1 of them, the last the shard's length),
    checked before anything is read or allocated by them. ValueError naming the index
    `name` (its shard's name and `.index`) and the record when it does not hold as many
    as dataset.json says its shard has, when a frame does not start at least `min_frame`
    bytes after the one before it (the fewest a record of the dataset's shapes takes;
    the first at byte 0), or when it does not end at the shard's end, `shard_size` (None:
    not known here; the reader then checks each frame's length when it reads it)."""
    if len(data) % _ENTRY.itemsize:
        raise ValueError(f"{name}: {len(data)} bytes, not a whole number of "
                         f"{_ENTRY.itemsize}-byte offsets")
    offsets = np.frombuffer(data, _ENTRY)
    if len(offsets) != records + 1:
        raise ValueError(f"{name}: {len(offsets) - 1} records indexed, dataset.json says "
                         f"{records}")
    if shard_size is not None and int(offsets[-1]) != shard_size:
        raise ValueError(f"{name}: ends at byte {offsets[-1]}, the shard has {shard_size}")
    if offsets[0]:
        raise ValueError(f"{name}: record 0 starts at byte {offsets[0]}, not 0")
    ends, starts = offsets[1:], offsets[:-1]
    short = np.flatnonzero((ends < starts) | (ends - starts < min_frame))  # no wrap: or'd
    if short.size:
        i = int(short[0])
        raise ValueError(f"{name}: record {i} spans bytes [{starts[i]}, {ends[i]}), where a "
                         f"record of the dataset's shapes takes at least {min_frame}")
    return offsets


def verify(name: str, offsets: np.ndarray, shard: BinaryIO) -> Optional[str]:
    """What is wrong with index `name` (`decode`d, against its shard's size) against its
    shard (a seekable binary file), or None: each frame's length header must span from
    its offset to the next."""
    for i, (start, end) in enumerate(zip(offsets[:-1].tolist(), offsets[1:].tolist())):
        shard.seek(start)
        head = shard.read(_LENGTH.size)
        if len(head) < _LENGTH.size or end - start != _LENGTH.unpack(head)[0] + FRAME_OVERHEAD:
            return f"{name}: record {i} at byte {start} does not match the shard"
    return None
