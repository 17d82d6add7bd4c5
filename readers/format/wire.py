"""The protobuf wire format of a tf.train.Example, by hand (numpy only): the fields a
writer frames (`varint`, `header`, `field`: the codecs' and writer.py's `ExampleEncoder`),
and a record read: `layout` walks a record's tags and lengths to find where each
feature's list sits, so that readers.numpy reads fixed-width values straight into a
batch (`Layout`); `list_values` reads a list message, packed or not.

Why by hand: building the message through the protobuf API copies arrays value by value
(here a window's array is one buffer), a Beam worker then never imports TensorFlow (its
seconds of start-up and hundreds of MB per worker process), and a PyTorch or JAX trainer
reads the shards without TensorFlow at all.
"""
from __future__ import annotations

import dataclasses
import functools
import math
from typing import Any, NamedTuple, Optional, Sequence, Union

import numpy as np

from readers.format.feature import Feature

# What the readers here take: a record's bytes, or a view of them (memoryview: a shard
# read whole, a record handed on without a copy).
Buffer = Union[bytes, bytearray, memoryview]

_ONE_BYTE = tuple(bytes((n,)) for n in range(0x80))   # most tags and lengths: no loop


def varint(n: int) -> bytes:
    if 0 <= n < 0x80:
        return _ONE_BYTE[n]
    n &= (1 << 64) - 1  # a negative int64 is ten bytes of two's complement
    out = bytearray()
    while n > 0x7F:
        out.append(n & 0x7F | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


@functools.lru_cache(maxsize=1024)
def header(number: int, length: int) -> bytes:
    """The tag and length of a length-delimited protobuf field (a window's fields have
    the same few lengths: cached)."""
    return varint(number << 3 | 2) + varint(length)


def field(number: int, payload: bytes) -> bytes:
    """A length-delimited protobuf field: tag, length, payload."""
    return header(number, len(payload)) + payload


_LIST_KINDS = {1: "bytes", 2: "float", 3: "int64"}   # Feature's oneof field numbers


def read_varint(buf: Buffer, pos: int) -> tuple[int, int]:
    byte = buf[pos]
    if byte < 0x80:    # the common case: one byte
        return byte, pos + 1
    value, shift = byte & 0x7F, 7
    while True:
        pos += 1
        byte = buf[pos]
        value |= (byte & 0x7F) << shift
        if byte < 0x80:
            return value, pos + 1
        shift += 7


def signed(value: int) -> int:
    """An int64 from its varint's 64 bits (two's complement)."""
    return value - (1 << 64) if value >= 1 << 63 else value


def _skip(buf: Buffer, pos: int, wire: int, what: str = "a tf.train.Example") -> int:
    """The position after a field's value of this wire type; `what` the message is, for
    the error."""
    if wire == 0:
        return read_varint(buf, pos)[1]
    if wire == 2:
        length, pos = read_varint(buf, pos)
        return pos + length
    if wire in (1, 5):
        return pos + (8 if wire == 1 else 4)
    raise ValueError(f"not {what}: wire type {wire}")


_MAX_FIELD_NUMBER = 2**29 - 1   # protobuf's largest


def message_fields(buf: Buffer, pos: int, end: int, what: str = "a tf.train.Example"):
    """(field number, wire type, start, end) of each field of a message in buf[pos:end];
    for a length-delimited field, [start, end) is its payload. ValueError (naming `what`)
    for a field number protobuf refuses (0, or past 2**29 - 1), a wire type it does not
    write or a field that runs past `end`, IndexError for a varint that runs past the
    buffer."""
    while pos < end:
        tag, pos = read_varint(buf, pos)
        wire = tag & 7
        if not 0 < tag >> 3 <= _MAX_FIELD_NUMBER:
            raise ValueError(f"not {what}: a field numbered {tag >> 3}")
        if wire == 2:
            length, pos = read_varint(buf, pos)
            after = pos + length
        else:
            after = _skip(buf, pos, wire, what)
        if after > end:
            raise ValueError(f"not {what}: a field runs past the end of its message")
        yield tag >> 3, wire, pos, after
        pos = after


class ListSpan(NamedTuple):
    """Where a feature's list message lies in a record: bytes [first, last), of `kind`
    "bytes", "float" or "int64" ("" for a Feature that holds no list)."""
    kind: str
    first: int
    last: int


class DirectSpan(NamedTuple):
    """A feature whose values are bytes [first, last) of an example, an array as stored."""
    name: str
    first: int
    last: int


class FixedSpan(NamedTuple):
    """Bytes [first, last) of the rest of an example, the same in every example of a
    layout: tags, lengths and keys."""
    first: int
    last: int
    data: bytes


@dataclasses.dataclass(frozen=True)
class Layout:
    """Where the features sit in the examples of one size and structure, so that a reader
    can put each fixed-width feature's values straight where they go (readers.numpy reads
    them into their rows of a batch) and read the rest, a few hundred bytes, on its own.

    `direct`: each feature stored as a plain array in one packed field (a FloatList of
    float32, or a raw array's bytes), in order of where it lies. Cut out, they leave the
    *rest* of the example, `rest_size` bytes, which holds the other features' lists
    (`lists`: where each lies in the rest) and the bytes every example of this layout
    shares (`fixed`: all that a walk's decisions depend on). A record whose rest has those
    bytes has this layout.
    """
    size: int
    direct: tuple[DirectSpan, ...]
    lists: dict[str, ListSpan]
    fixed: tuple[FixedSpan, ...]

    @property
    def rest_size(self) -> int:
        return self.size - sum(span.last - span.first for span in self.direct)

    def fits(self, rest: Buffer, start: int = 0) -> bool:
        """Whether the rest at rest[start:] is that of an example of this layout."""
        return all(rest[start + span.first:start + span.last] == span.data
                   for span in self.fixed)

    def values(self, features: Sequence[Feature], rest: Buffer,
               start: int = 0) -> dict[str, Any]:
        """The values of `features` (none of them direct) from a rest that `fits`, as
        stored (`Codec.from_wire`)."""
        out = {}
        for f in features:
            kind, first, last = self.lists[f.name]
            out[f.name] = f.codec.from_wire(kind, rest, start + first, start + last)
        return out


def layout(features: Sequence[Feature], record: Buffer, start: int = 0,
           end: Optional[int] = None) -> Layout:
    """The layout of the example record[start:end]: `features` that are stored as plain
    arrays in one packed field are direct. It reads any valid encoding of such an Example
    (packed or not); ValueError on a record that does not fit."""
    end = len(record) if end is None else end
    entries = feature_lists(record, start, end)
    for f in features:
        if f.name not in entries:
            raise ValueError(f"feature {f.name!r} is missing")
    direct = _direct_spans(features, entries, record, start)
    rest = b"".join(bytes(record[start + a:start + b])
                    for a, b in _gaps([(s.first, s.last) for s in direct], end - start))
    lists = _lists_in_rest(entries, direct)
    fixed = tuple(FixedSpan(a, b, rest[a:b]) for a, b in _gaps(
        sorted((span.first, span.last) for span in lists.values()), len(rest)))
    return Layout(end - start, tuple(direct), lists, fixed)


def _direct_spans(features: Sequence[Feature], entries: dict[str, ListSpan], record: Buffer,
                  start: int) -> list[DirectSpan]:
    """The direct spans of `features` (`_direct_span`), in the record's order."""
    return sorted((span for f in features
                   if (span := _direct_span(f, entries[f.name], record, start))),
                  key=lambda span: span.first)


def _lists_in_rest(entries: dict[str, ListSpan], direct: list[DirectSpan]
                   ) -> dict[str, ListSpan]:
    """Where each list but the direct ones lies in the rest (the direct spans cut
    out)."""
    return {name: ListSpan(entry.kind, _in_rest(entry.first, direct),
                           _in_rest(entry.last, direct))
            for name, entry in entries.items()
            if name not in {span.name for span in direct}}


def _direct_span(feature: Feature, entry: ListSpan, record: Buffer,
                 start: int) -> Optional[DirectSpan]:
    """Where `feature`'s values lie as one plain array in the record (relative to
    `start`), when they do: its codec stores them so, and its list is one packed field
    of exactly their bytes."""
    dtype = feature.codec.stored_dtype
    if (dtype is None or entry.kind != feature.codec.list_kind
            or entry.last - entry.first < 2 or record[start + entry.first] != 0x0A):
        return None
    length, at = read_varint(record, start + entry.first + 1)
    if (length == math.prod(feature.shape) * dtype.itemsize > 0
            and at + length == start + entry.last):
        return DirectSpan(feature.name, at - start, entry.last)
    return None


def _gaps(spans: list[tuple[int, int]], size: int) -> list[tuple[int, int]]:
    """The non-empty ranges of [0, size) between sorted, disjoint `spans`."""
    edges = [0, *(x for span in spans for x in span), size]
    return [(a, b) for a, b in zip(edges[0::2], edges[1::2], strict=True) if b > a]


def _in_rest(position: int, direct: list[DirectSpan]) -> int:
    """A position of the example as a position of its rest (the direct spans cut out)."""
    return position - sum(span.last - span.first for span in direct if span.last <= position)


def example_values(features: Sequence[Feature], record: Buffer
                   ) -> dict[str, Any]:
    """The values of `features` in one example record, as stored (`Codec.from_wire`):
    how `readers.inspect --verify` parses a record without TensorFlow. ValueError when a
    feature is missing or its list does not fit its spec."""
    entries = feature_lists(record)
    values = {}
    for f in features:
        if f.name not in entries:
            raise ValueError(f"feature {f.name!r} is missing")
        kind, first, last = entries[f.name]
        values[f.name] = f.codec.from_wire(kind, record, first, last)
    return values


def feature_lists(record: Buffer, start: int = 0, end: Optional[int] = None
                  ) -> dict[str, ListSpan]:
    """name -> where the list of each feature of the example record[start:end] lies: its
    list message is record[start + first:start + last] (`list_values` reads it).
    ValueError on a record that is not an Example."""
    end = len(record) if end is None else end
    try:
        walked = _walk(record, start, end)
    except IndexError:
        raise ValueError("not a tf.train.Example: a field runs past the record's end") from None
    return {key.decode("utf-8", "replace"): ListSpan(*entry) for key, entry in walked.items()}


def _walk(record: Buffer, start: int,
          end: int) -> dict[bytes, tuple[str, int, int]]:
    """One loop over the map entries of an Example, reading tags and lengths only (an
    entry's key and value by `_map_entry`, the value's list by `_list_of`)."""
    read = read_varint
    entries = {}
    for number, _, first, last in message_fields(record, start, end):
        if number != 1:                              # Example.features
            continue
        pos = first
        while pos < last:                            # Features.feature: map entries
            tag = record[pos]                        # tags and key lengths are one byte;
            pos += 1                                 # longer varints take the slow path
            if tag != 0x0A:                          # not field 1, length-delimited
                if tag >= 0x80:
                    tag, pos = read(record, pos - 1)
                pos = _skip(record, pos, tag & 7)
                continue
            length = record[pos]
            length, pos = (length, pos + 1) if length < 0x80 else read(record, pos)
            key, value, pos = _map_entry(record, pos, pos + length)
            if key is not None and value is not None:
                entries[key] = _list_of(record, value, start)
    return entries


def _map_entry(record: Buffer, pos: int, end: int
               ) -> tuple[Optional[bytes], Optional[tuple[int, int]], int]:
    """The key and the value's (first, last) of the map entry at record[pos:end] (None
    for either it lacks), and where its last field ends (past `end` when it overruns);
    ValueError for a field that is neither."""
    key = value = None
    while pos < end:                                 # key = 1, value = 2: nothing else
        tag = record[pos]
        if tag not in (0x0A, 0x12):
            raise ValueError(f"not a tf.train.Example: a map entry holds tag {tag}")
        length = record[pos + 1]
        length, pos = (length, pos + 2) if length < 0x80 else read_varint(record, pos + 1)
        if tag == 0x0A:
            key = bytes(record[pos:pos + length])
        else:
            value = pos, pos + length
        pos += length
    return key, value, pos


def _list_of(record: Buffer, value: tuple[int, int], start: int) -> tuple[str, int, int]:
    """(kind, first, last) of the list a Feature message at record[value[0]:value[1]]
    holds, relative to `start`; ("", at, at) for an empty Feature. ValueError when the
    list overruns the Feature."""
    at = value[0]
    if at == value[1]:
        return ("", at - start, at - start)   # an empty Feature
    kind_tag, length = record[at], record[at + 1]   # Feature: one list field
    length, at = (length, at + 2) if length < 0x80 else read_varint(record, at + 1)
    if at + length > value[1]:
        raise ValueError("not a tf.train.Example: a list overruns its feature")
    return (_LIST_KINDS.get(kind_tag >> 3, "?"), at - start, at + length - start)


def list_values(kind: str, record: Buffer, start: int, end: int) -> list:
    """The values of a BytesList, FloatList or Int64List message, packed or not."""
    values: list = []
    for number, wire, v_start, v_end in message_fields(record, start, end):
        if number != 1:
            continue
        if kind == "bytes":
            values.append(bytes(record[v_start:v_end]))
        elif kind == "float":
            values.append(np.frombuffer(record, "<f4", (v_end - v_start) // 4, v_start))
        elif wire == 2:   # packed int64 varints
            pos = v_start
            while pos < v_end:
                value, pos = read_varint(record, pos)
                values.append(signed(value))
        else:
            values.append(signed(read_varint(record, v_start)[0]))
    return values
