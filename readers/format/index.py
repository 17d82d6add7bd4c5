"""The offset index beside an uncompressed shard: where each record's frame starts.

One little-endian uint64 per record (the offset of its TFRecord frame), then the shard's
length: record i is the frame in [offsets[i], offsets[i + 1]). The job writes it with
`encode`; readers.numpy reads it with `decode` (one seek per record, so any window in any
order); `python -m readers.inspect --verify` checks it against its shard with `verify`.
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


def decode(data: bytes, name: str, records: int) -> np.ndarray:
    """The offsets an index holds (`records` + 1 of them, the last the shard's length);
    ValueError naming the index `name` when it does not hold as many as dataset.json
    says its shard has."""
    if len(data) % _ENTRY.itemsize:
        raise ValueError(f"{name}: {len(data)} bytes, not a whole number of "
                         f"{_ENTRY.itemsize}-byte offsets")
    offsets = np.frombuffer(data, _ENTRY)
    if len(offsets) != records + 1:
        raise ValueError(f"{name}: {len(offsets) - 1} records indexed, dataset.json says "
                         f"{records}")
    return offsets


def verify(name: str, offsets: np.ndarray, shard: BinaryIO, shard_size: int) -> Optional[str]:
    """What is wrong with index `name` against its shard (a seekable binary file of
    `shard_size` bytes), or None: it must end at the shard's end, and each frame's length
    header must span from its offset to the next."""
    if int(offsets[-1]) != shard_size:
        return f"{name}: ends at byte {offsets[-1]}, the shard has {shard_size}"
    for i, (start, end) in enumerate(zip(offsets[:-1].tolist(), offsets[1:].tolist())):
        shard.seek(start)
        head = shard.read(_LENGTH.size)
        if len(head) < _LENGTH.size or end - start != _LENGTH.unpack(head)[0] + FRAME_OVERHEAD:
            return f"{name}: record {i} at byte {start} does not match the shard"
    return None
