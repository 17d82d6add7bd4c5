"""The offset index beside an uncompressed shard: where each record's frame starts.

Text, one line per record, `offset length` in decimal and a newline: the byte where its
TFRecord frame starts and the frame's length, header and CRCs included. That is what
`tfrecord2idx` (DALI's and the `tfrecord` package's) writes, so DALI's
`fn.readers.tfrecord` and the `tfrecord` package read our shards through it as it is
(docs/readers.md). The job writes it with `encode`; readers.numpy reads it with `decode`
(one seek per record, so any window in any order); `python -m readers.inspect --verify`
checks it against its shard with `verify`. Datasets of format versions 1 and 2 have a
binary index under the same name (little-endian uint64 offsets, then the shard's length);
`decode` still reads it, by the dataset's version. Offsets are data too: `decode` checks
them before a reader allocates or reads by them.
"""
from __future__ import annotations

import re
import struct
from typing import BinaryIO, NoReturn, Optional, Sequence

import numpy as np

from readers.format.tfrecord import FRAME_OVERHEAD

TEXT_SINCE = 3                    # the first format version whose index is text
_ENTRY = np.dtype("<u8")          # an offset of the binary index (versions 1 and 2)
_LENGTH = struct.Struct("<Q")     # a frame's length header, without its CRC
_DIGITS = 18                      # at most per number: two of them add up in an int64
_LINE = re.compile(rb"(0|[1-9][0-9]{0,%d}) (0|[1-9][0-9]{0,%d})" % (_DIGITS - 1, _DIGITS - 1))
_LONGEST_LINE = 2 * _DIGITS + 2
_NEWLINE, _SPACE, _ZERO, _NINE = b"\n 09"


def encode(offsets: Sequence[int]) -> bytes:
    """An index's text: one `offset length` line per frame, from `offsets` of the
    frames, then the shard's length."""
    return "".join(f"{start} {end - start}\n"
                   for start, end in zip(offsets[:-1], offsets[1:], strict=True)).encode("ascii")


def largest(records: int, format_version: int) -> int:
    """The most bytes the index of a shard of `records` records can have: what a reader
    reads of it at most."""
    if format_version >= TEXT_SINCE:
        return records * _LONGEST_LINE
    return (records + 1) * _ENTRY.itemsize


def decode(data: bytes, name: str, records: int, format_version: int,
           shard_size: Optional[int] = None, min_frame: int = FRAME_OVERHEAD) -> np.ndarray:
    """The offsets an index holds (`records` + 1 of them, the last the shard's length),
    checked before anything is read or allocated by them: the text index of
    `format_version` 3 on, the binary one before. ValueError naming the index `name` (its
    shard's name and `.index`) and the line or record when it is not lines of two
    decimal numbers each, when it does not hold as many records as dataset.json says its
    shard has, when a frame does not start where the one before it ends (text) or at
    least `min_frame` bytes after it (the fewest a record of the dataset's shapes takes;
    the first at byte 0), or when it does not end at the shard's end, `shard_size` (None:
    not known here; the reader then checks each frame's length when it reads it)."""
    if format_version >= TEXT_SINCE:
        offsets = _text_offsets(data, name, records)
    else:
        offsets = _binary_offsets(data, name, records)
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


def _binary_offsets(data: bytes, name: str, records: int) -> np.ndarray:
    """The offsets of a binary index (format versions 1 and 2), as many as it holds."""
    if len(data) % _ENTRY.itemsize:
        raise ValueError(f"{name}: {len(data)} bytes, not a whole number of "
                         f"{_ENTRY.itemsize}-byte offsets")
    offsets = np.frombuffer(data, _ENTRY)
    if len(offsets) != records + 1:
        raise ValueError(f"{name}: {len(offsets) - 1} records indexed, dataset.json says "
                         f"{records}")
    return offsets


def _text_offsets(data: bytes, name: str, records: int) -> np.ndarray:
    """The offsets of a text index's `records` lines, then where the last frame ends;
    each line's frame must end where the next line's starts. Its length is bounded by
    `records` first, so a huge file costs no more than reading it."""
    if len(data) > records * _LONGEST_LINE:
        raise ValueError(f"{name}: {len(data)} bytes, more than the {records} 'offset length' "
                         "lines dataset.json says it has can take")
    numbers = _numbers(data)
    if numbers is None or len(numbers) != 2 * records:
        _refuse_lines(data, name, records)
    starts, lengths = numbers[0::2], numbers[1::2]
    ends = starts + lengths
    gap = np.flatnonzero(ends[:-1] != starts[1:])
    if gap.size:
        i = int(gap[0])
        raise ValueError(f"{name}: line {i + 1}: the frame at byte {starts[i]} of {lengths[i]} "
                         f"bytes ends at {ends[i]}, line {i + 2} starts at {starts[i + 1]}")
    return np.append(starts, ends[-1:] if len(ends) else np.zeros(1, np.int64))


def _numbers(data: bytes) -> Optional[np.ndarray]:
    """The numbers of lines that are each two decimal numbers of at most _DIGITS
    digits, a space between and a newline after, in order; None when `data` is not
    all such lines (the caller then finds the first line that is not). Checked by numpy
    over the bytes, then parsed by numpy's C text parser, which they can no longer trip."""
    if not data:
        return np.zeros(0, np.int64)
    text = np.frombuffer(data, np.uint8)
    separators = np.flatnonzero(text < _ZERO)     # all that is not a digit, or above one
    if not (_space_then_newline(text, separators) and _plain_numbers(text, separators)):
        return None
    return np.fromstring(data, np.int64, sep=" ")


def _space_then_newline(text: np.ndarray, separators: np.ndarray) -> bool:
    """Whether `text` is digits but at `separators`, which alternate a space and a
    newline, the last one its last byte."""
    return not (text.max() > _NINE or not len(separators) or len(separators) % 2
                or separators[-1] != len(text) - 1 or (text[separators[0::2]] != _SPACE).any()
                or (text[separators[1::2]] != _NEWLINE).any())


def _plain_numbers(text: np.ndarray, separators: np.ndarray) -> bool:
    """Whether every number between the separators has 1 to _DIGITS digits and no
    leading zero."""
    first = np.concatenate(([0], separators[:-1] + 1))
    widths = separators - first
    return not (widths.min() < 1 or widths.max() > _DIGITS
                or (text[first[widths > 1]] == _ZERO).any())


def _refuse_lines(data: bytes, name: str, records: int) -> NoReturn:
    """Raise the ValueError that names the first line of `data` that is not an
    `offset length` line, or says how many lines it has when all are."""
    lines = data.split(b"\n")
    for number, line in enumerate(lines[:-1] + [lines[-1]] * bool(lines[-1]), 1):
        if not _LINE.fullmatch(line):
            raise ValueError(f"{name}: line {number}: {_shown(line)} is not 'offset length' "
                             f"(two decimal numbers of at most {_DIGITS} digits, one space)")
    if lines[-1]:
        raise ValueError(f"{name}: line {len(lines)}: {_shown(lines[-1])} does not end "
                         "with a newline")
    raise ValueError(f"{name}: {len(lines) - 1} records indexed, dataset.json says {records}")


def _shown(line: bytes) -> str:
    return repr(line[:40].decode("ascii", "replace")) + ("..." if len(line) > 40 else "")


def verify(name: str, offsets: np.ndarray, shard: BinaryIO) -> None:
    """Index `name` (`decode`d, against its shard's size) against its shard (a seekable
    binary file): each frame's length header must span from its offset to the next;
    ValueError naming the index and the first record that does not."""
    for i, (start, end) in enumerate(zip(offsets[:-1].tolist(), offsets[1:].tolist(), strict=True)):
        shard.seek(start)
        head = shard.read(_LENGTH.size)
        if len(head) < _LENGTH.size or end - start != _LENGTH.unpack(head)[0] + FRAME_OVERHEAD:
            raise ValueError(f"{name}: record {i} at byte {start} does not match the shard")
