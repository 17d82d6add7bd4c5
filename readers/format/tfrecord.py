"""TFRecord framing: a record's length header and masked CRCs around its bytes.

A TFRecord file is a chain of frames: length (8 bytes, little-endian), the masked CRC32C
of the length (4), the data, the masked CRC32C of the data (4). The job frames its
records with `frame` (or `header` and `footer`); readers.numpy checks frames it reads in
pieces with `header` and `mask`; `read_frame` reads one frame from a file honestly: a bad
record is one `Lost` record, a broken length header loses the rest of the file.
"""
from __future__ import annotations

import struct
from typing import BinaryIO, NamedTuple, Sequence, Union

import google_crc32c

HEADER_BYTES = 12      # the length and its CRC
FOOTER_BYTES = 4       # the data's CRC
FRAME_OVERHEAD = HEADER_BYTES + FOOTER_BYTES
_LENGTH = struct.Struct("<Q")
_CRC = struct.Struct("<I")


def mask(crc: int) -> int:
    """TFRecord's masked CRC32C of a CRC32C (readers.numpy extends one over pieces)."""
    return (((crc >> 15) | (crc << 17)) + 0xA282EAD8) & 0xFFFFFFFF


def masked_crc(data: bytes) -> int:
    return mask(google_crc32c.value(data))


def header(length: int) -> bytes:
    """The 12 header bytes of the frame of a record of `length` bytes: they hang on the
    length alone."""
    data = _LENGTH.pack(length)
    return data + _CRC.pack(masked_crc(data))


def footer(record: bytes) -> bytes:
    """The 4 footer bytes of a record's frame: its data's masked CRC."""
    return _CRC.pack(masked_crc(record))


def frame(record: bytes) -> bytes:
    """A record's TFRecord frame (one join: a window's bytes are copied once, not twice)."""
    return b"".join((header(len(record)), record, footer(record)))


def frame_is_sound(frame: Union[bytes, bytearray], data: Sequence, expected_header: bytes
                   ) -> bool:
    """Whether a frame in memory is that of its data: `frame` starts with
    `expected_header` (the header of the length it should have: it hangs on the length
    alone) and ends with the masked CRC of its data, which `data` holds in pieces
    (bytes-like, or numpy arrays of bytes: readers.numpy scatters a record's values into
    a batch's rows before it checks them)."""
    crc = 0
    for piece in data:
        crc = google_crc32c.extend(crc, piece)
    return (frame[:HEADER_BYTES] == expected_header
            and mask(crc) == _CRC.unpack_from(frame, len(frame) - FOOTER_BYTES)[0])


class Lost(NamedTuple):
    """Records that could not be read: one bad record, or the rest of a file."""
    reason: str
    records: int          # how many records this stands for (an estimate for framing)
    bytes_lost: int
    framing: bool         # True: the rest of the file is gone


_READ_PIECE = 64 << 20   # a length header, even one whose CRC holds, is only a claim


def read_exactly(f: BinaryIO, size: int) -> bytes:
    """`size` bytes, or fewer only at the end of the file (a read may return less). Read
    in pieces of at most 64 MB: a record that claims more bytes than its file holds costs
    the file's bytes and one piece's buffer, not what it claims (a read allocates all it
    is asked for, a MemoryError for a length of 2**50)."""
    parts, done = [], 0
    while done < size:
        part = f.read(min(size - done, _READ_PIECE))
        if not part:
            break
        parts.append(part)
        done += len(part)
    return b"".join(parts)


def read_length(f: BinaryIO) -> Union[int, Lost, None]:
    """The next frame's length, its header read and checked: a Lost that takes the rest
    of the file when the header is broken, None at a clean end of file."""
    head = read_exactly(f, HEADER_BYTES)
    if not head:
        return None
    if len(head) < HEADER_BYTES:
        return Lost("the file ends inside a record's length frame", 1, len(head), True)
    length, = _LENGTH.unpack_from(head)
    if masked_crc(head[:_LENGTH.size]) != _CRC.unpack_from(head, _LENGTH.size)[0]:
        return Lost("a record's length frame is corrupt", 1, 0, True)
    return length


def read_frame(f: BinaryIO) -> Union[bytes, Lost, None]:
    """The next record of `f`: its bytes, a Lost, or None at a clean end of file.

    Data whose CRC fails under a sound length header is one lost record, and the next
    frame can still be read; a broken length header (or a file ending inside a frame)
    loses the rest of the file (`framing`)."""
    length = read_length(f)
    if not isinstance(length, int):
        return length
    data = read_exactly(f, length)
    crc = read_exactly(f, FOOTER_BYTES)
    if len(data) < length or len(crc) < FOOTER_BYTES:
        return Lost(f"the file ends inside a record ({len(data)} of {length} bytes)", 1,
                    HEADER_BYTES + len(data) + len(crc), True)
    if masked_crc(data) != _CRC.unpack(crc)[0]:
        return Lost("a record's data fails its CRC", 1, FRAME_OVERHEAD + length, False)
    return data
