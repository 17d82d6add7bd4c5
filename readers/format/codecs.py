"""One codec per feature encoding: how its values sit in an Example and come back out.

A codec (TFDS's FeatureConnector is the model) is bound to one feature and carries all
that its encoding decides:

- `encode`: a value -> the wire bytes of its tf.train.Feature (the Beam job);
- the wire layout: `list_kind`, the Feature's list, and `stored_dtype`, the dtype of
  values stored as one plain array that a reader can read straight into a batch
  ("direct"), else None;
- `stored_as`: how the feature sits in an Example, for dataset.json;
- readers.numpy: `from_wire` (a value as stored, from its list message), `column_dtype`
  and `store` (into a batch's column), `finish` (what the reader gives);
- tf.data: `parse_feature` and `decode` (TensorFlow imported inside them only).

  float: a FloatList of float32 (parsed by memcpy, the fastest path)
  int64: an Int64List
  bytes: one BytesList entry (a string scalar)
  raw:   one BytesList entry holding the little-endian array bytes (dtypes that a
         FloatList would not keep, float16, bfloat16 or float64, and uint8 pixels)
  png, jpeg: a BytesList of L encoded frames of a uint8 [L, H, W, C] window

Both readers give the same values: float16 and bfloat16 become float32 unless
`keep_float16`; `float_pixels` turns uint8 into float32 in [0, 1]. The image codecs (png,
jpeg: Pillow and TensorFlow's decoders) live in image_codecs.py. Adding an encoding is one
class, its entry in encodings.CODECS, and its tests.
"""
from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any, ClassVar, Optional, Union

import numpy as np

from readers.format.feature import Feature
from readers.format.wire import field, header, list_values, read_varint, signed, varint

if TYPE_CHECKING:
    import tensorflow as tf

Buffer = Union[bytes, bytearray]


def _one_field(record: Buffer, start: int, end: int) -> Optional[int]:
    """Where the values start when a list message record[start:end] is the usual one
    field of them (packed), else None."""
    if end > start and record[start] == 0x0A:
        length, at = read_varint(record, start + 1)
        if at + length == end:
            return at
    return None


def to_unit(stored: np.ndarray, out: Optional[np.ndarray] = None) -> np.ndarray:
    """uint8 pixels as float32 in [0, 1] (`float_pixels`), into `out` where given."""
    return np.divide(stored, np.float32(255.0), out=out, dtype=np.float32)


def tf_to_unit(values: tf.Tensor) -> tf.Tensor:
    import tensorflow as tf

    return tf.cast(values, tf.float32) / 255.0


class Codec:
    """The codec of one feature; a subclass per encoding."""
    encoding: ClassVar[str]
    list_kind: ClassVar[str] = "bytes"     # bytes_list, float_list or int64_list
    decodes_images: ClassVar[bool] = False  # worth a thread per core in the readers
    # The little-endian dtype of values stored as one plain array (readers.numpy reads
    # them straight into a batch's rows), else None.
    stored_dtype: Optional[np.dtype] = None
    column_dtype: np.dtype     # of a batch's column of values as stored (readers.numpy)
    dtypes: ClassVar[tuple[str, ...]]   # what a feature of this encoding may hold

    def __init__(self, feature: Feature):
        self.feature = feature

    @classmethod
    def check(cls, feature: Feature) -> None:
        """ValueError saying what makes `feature`'s dtype or shape one this encoding
        cannot hold: dataset.json is checked so before a reader trusts it (a `complex64`
        float list, a bytes feature of shape [4])."""
        if feature.dtype not in cls.dtypes:
            raise ValueError(f"dtype {feature.dtype!r} is not stored as {cls.encoding} (it "
                             f"holds {', '.join(cls.dtypes)})")

    def min_bytes(self) -> int:
        """The fewest bytes a value of this feature takes in an Example: every record
        holds at least this, so a shard of n records holds n times as much, which checks
        dataset.json's shapes against the shards before a reader allocates by them."""
        raise NotImplementedError

    # --- the wire format

    def encode(self, value: Any) -> bytes:
        """A tf.train.Feature's wire bytes: bytes_list = 1, float_list = 2, int64_list = 3,
        each a message whose field 1 holds the (packed) values."""
        raise NotImplementedError

    def encode_parts(self, value: Any) -> list:
        """`encode`'s bytes as a list of bytes-like parts (`writer.ExampleEncoder` joins a
        window's parts once); an array codec hands the array's own buffer."""
        return [self.encode(value)]

    def fixed_head(self) -> Optional[bytes]:
        """The Feature's bytes before its values' buffer (`values_buffer`), where they
        are the same for every value: a fixed number of fixed-width values (float32,
        raw). `writer.ExampleEncoder` frames such a feature once, not once an example.
        None: each value's Feature comes whole from `encode_parts`."""
        return None

    def values_buffer(self, value: Any) -> Union[bytes, memoryview]:
        """The Feature's bytes after `fixed_head` (the value's own buffer where it can
        be), for a codec whose `fixed_head` is not None."""
        raise NotImplementedError

    def stored_as(self) -> dict:
        """How the feature sits in a tf.train.Example, for readers in other codebases:
        the list kind, how many values, and what they hold."""
        raise NotImplementedError

    def size_estimate(self) -> int:
        """An upper estimate of the bytes of one value, without the list's framing."""
        return math.prod(self.feature.shape) * self.column_dtype.itemsize

    # --- readers.numpy

    def from_wire(self, kind: str, record: Buffer, start: int, end: int) -> Any:
        """The value as stored from its list message, record[start:end], packed or not
        (`readers.format.wire.Layout.values`); ValueError when it does not fit."""
        if kind != self.list_kind:
            raise ValueError(f"feature {self.feature.name!r} is a {kind} list, not "
                             f"{self.list_kind}")
        return self._value(record, start, end)

    def _value(self, record: Buffer, start: int, end: int) -> Any:
        raise NotImplementedError

    def store(self, column: np.ndarray, row: int, value: Any) -> None:
        """A value from `from_wire` into row `row` of its batch's column."""
        column[row] = value

    def finish(self, stored: np.ndarray, *, float_pixels: bool, keep_float16: bool,
               out: Optional[np.ndarray] = None) -> np.ndarray:
        """A batch's column as stored -> as the readers give it: `stored` itself (or a
        view of it), or values of another dtype, written into `out` where it is given
        (memory of their shape and dtype: a DataLoader worker's to hand over)."""
        return stored

    # --- tf.data

    def parse_feature(self) -> tf.io.FixedLenFeature:
        raise NotImplementedError

    def decode(self, parsed: tf.Tensor, *, float_pixels: bool,
               keep_float16: bool) -> tf.Tensor:
        """A batch parsed with `parse_feature` -> [batch, *shape] as the readers give it."""
        return parsed

    def decode_clip(self, parsed: tf.Tensor, frames: tf.Tensor, *, float_pixels: bool,
                    keep_float16: bool) -> tf.Tensor:
        """`decode`, but only the frames `frames` ([batch, l] positions) of each window
        ([batch, l, ...]; a per-frame feature's clip, readers.clips)."""
        import tensorflow as tf

        return tf.gather(self.decode(parsed, float_pixels=float_pixels,
                                     keep_float16=keep_float16), frames, batch_dims=1)


class _ArrayCodec(Codec):
    """Values that are a numpy array of the feature's shape and dtype."""

    def encode(self, value: Any) -> bytes:
        return b"".join(self.encode_parts(value))

    def encode_parts(self, value: Any) -> list:
        return self._encode(self._array(value))

    def _array(self, value: Any) -> np.ndarray:
        """`value` as an array of the feature's dtype; ValueError if not of its shape."""
        f = self.feature
        array = np.asarray(value, dtype=f.dtype)
        if array.shape != f.shape:
            raise ValueError(f"feature {f.name!r}: shape {array.shape} != {f.shape}")
        return array

    def _encode(self, array: np.ndarray) -> list:
        """The Feature's parts (`encode_parts`) for an array of the feature's shape."""
        raise NotImplementedError


def _list_parts(list_field: int, payload, packed: bool = True) -> list:
    """A Feature's parts whose list (field `list_field`) holds `payload` as its one
    field 1: packed values (none when the payload is empty), or one byte string."""
    return [_list_head(list_field, len(payload), packed), payload]


def _list_head(list_field: int, size: int, packed: bool = True) -> bytes:
    """The bytes of such a Feature before its payload of `size` bytes."""
    if packed and not size:
        return header(list_field, 0)
    inner = header(1, size)
    return header(list_field, len(inner) + size) + inner


def _little_endian_bytes(array: np.ndarray, dtype) -> memoryview:
    """The array's values as `dtype`, row-major, as a flat byte view (no copy when the
    array is already so)."""
    return (np.ascontiguousarray(array.astype(dtype, copy=False))
            .reshape(-1).view(np.uint8).data)


class _NumberListCodec(_ArrayCodec):
    """A FloatList or an Int64List of the values, flattened row-major."""
    list_field: ClassVar[int]       # the Feature's field of that list
    value_bytes: ClassVar[int]      # the fewest bytes of one value (a varint: 1)

    def min_bytes(self) -> int:
        return math.prod(self.feature.shape) * self.value_bytes

    def _encode(self, array: np.ndarray) -> list:
        return _list_parts(self.list_field, self._payload(array))

    def _payload(self, array: np.ndarray):
        """The packed values, bytes-like."""
        raise NotImplementedError

    def stored_as(self) -> dict:
        return {"list": f"{self.list_kind}_list", "values": math.prod(self.feature.shape),
                "value_dtype": self.column_dtype.name,
                "order": "row-major (C) flattening of shape"}

    def parse_feature(self) -> tf.io.FixedLenFeature:
        import tensorflow as tf

        return tf.io.FixedLenFeature(self.feature.shape, tf.dtypes.as_dtype(self.column_dtype))


class FloatCodec(_NumberListCodec):
    encoding = list_kind = "float"
    dtypes = ("float32",)
    list_field, value_bytes = 2, 4
    stored_dtype = column_dtype = np.dtype("<f4")

    def _payload(self, array: np.ndarray) -> memoryview:
        return _little_endian_bytes(array, "<f4")

    def fixed_head(self) -> bytes:
        return _list_head(self.list_field, self.min_bytes())

    def values_buffer(self, value: Any) -> memoryview:
        return self._payload(self._array(value))

    def _value(self, record: Buffer, start: int, end: int) -> np.ndarray:
        at = _one_field(record, start, end)
        if at is not None:                               # packed floats: one view
            return np.frombuffer(record, "<f4", (end - at) // 4, at).reshape(self.feature.shape)
        values = list_values("float", record, start, end)
        array = values[0] if len(values) == 1 else (
            np.concatenate(values) if values else np.zeros(0, "<f4"))
        return array.reshape(self.feature.shape)


class Int64Codec(_NumberListCodec):
    encoding = list_kind = "int64"
    dtypes = ("int64",)
    list_field, value_bytes = 3, 1
    column_dtype = np.dtype("<i8")

    def _payload(self, array: np.ndarray) -> bytes:
        return b"".join(varint(int(v)) for v in array.ravel())

    def _value(self, record: Buffer, start: int, end: int) -> np.ndarray:
        at = _one_field(record, start, end)
        if at is not None and not self.feature.shape:     # one packed varint
            value, after = read_varint(record, at)
            if after == end:
                return np.array(signed(value), np.int64)
        return np.array(list_values("int64", record, start, end),
                        np.int64).reshape(self.feature.shape)


class BytesCodec(Codec):
    encoding = "bytes"
    dtypes = ("string",)
    column_dtype = np.dtype(object)

    @classmethod
    def check(cls, feature: Feature) -> None:
        if feature.shape:
            raise ValueError(f"a {cls.encoding} feature is one string, shape [], not "
                             f"{list(feature.shape)}")
        super().check(feature)

    def size_estimate(self) -> int:
        return math.prod(self.feature.shape)

    def min_bytes(self) -> int:
        return 0

    def encode(self, value: bytes) -> bytes:
        return field(1, field(1, value))

    def stored_as(self) -> dict:
        return {"list": "bytes_list", "values": 1, "content": "UTF-8 text"}

    def _value(self, record: Buffer, start: int, end: int) -> bytes:
        at = _one_field(record, start, end)
        if at is not None:
            return bytes(record[at:end])
        values = list_values("bytes", record, start, end)
        if len(values) != 1:
            raise ValueError(f"feature {self.feature.name!r}: {len(values)} strings, not 1")
        return values[0]

    def finish(self, stored: np.ndarray, *, float_pixels: bool, keep_float16: bool,
               out: Optional[np.ndarray] = None) -> np.ndarray:
        """Numpy bytes (`S`) arrays: what Grain's batching and a DataLoader's
        `default_convert` keep as they are, so every path gives the same type (never
        into `out`: their width is the batch's longest id's)."""
        return stored.astype(np.bytes_)

    def parse_feature(self) -> tf.io.FixedLenFeature:
        import tensorflow as tf

        return tf.io.FixedLenFeature([], tf.string)


class RawCodec(_ArrayCodec):
    """The array's little-endian bytes; bfloat16 travels as its 16 bits (uint16), so that
    readers.numpy needs no ml_dtypes unless `keep_float16` asks for bfloat16 itself."""
    encoding = "raw"
    # those both readers decode (tf.io.decode_raw takes no unsigned 32 or 64 bits)
    dtypes = ("float16", "bfloat16", "float32", "float64", "uint8", "int8", "uint16",
              "int16", "int32", "int64")

    def __init__(self, feature: Feature):
        super().__init__(feature)
        self.stored_dtype = self.column_dtype = np.dtype(
            "<u2" if feature.dtype == "bfloat16" else np.dtype(feature.dtype).newbyteorder("<"))

    def min_bytes(self) -> int:
        return math.prod(self.feature.shape) * self.column_dtype.itemsize   # = stored

    def _encode(self, array: np.ndarray) -> list:
        return _list_parts(1, self._bytes(array), packed=False)

    def fixed_head(self) -> bytes:
        return _list_head(1, self.min_bytes(), packed=False)

    def values_buffer(self, value: Any) -> memoryview:
        return self._bytes(self._array(value))

    @staticmethod
    def _bytes(array: np.ndarray) -> memoryview:
        return _little_endian_bytes(array, array.dtype.newbyteorder("<"))

    def stored_as(self) -> dict:
        return {"list": "bytes_list", "values": 1, "value_dtype": self.feature.dtype,
                "byte_order": "little", "order": "row-major (C) flattening of shape",
                "content": "the array's bytes"}

    def _value(self, record: Buffer, start: int, end: int) -> np.ndarray:
        at = _one_field(record, start, end)
        data = record[at:end] if at is not None else list_values("bytes", record, start, end)[0]
        return np.frombuffer(data, self.stored_dtype).reshape(self.feature.shape)

    def finish(self, stored: np.ndarray, *, float_pixels: bool, keep_float16: bool,
               out: Optional[np.ndarray] = None) -> np.ndarray:
        dtype = self.feature.dtype
        if dtype == "bfloat16":            # stored as its bits
            if keep_float16:
                import ml_dtypes
                return stored.view(ml_dtypes.bfloat16)
            bits = np.empty(stored.shape, np.uint32) if out is None else out.view(np.uint32)
            np.left_shift(stored, 16, out=bits, dtype=np.uint32)
            return bits.view(np.float32)
        if dtype == "float16" and not keep_float16:
            if out is None:
                return stored.astype(np.float32)
            np.copyto(out, stored)
            return out
        if float_pixels and dtype == "uint8":
            return to_unit(stored, out)
        return stored

    def parse_feature(self) -> tf.io.FixedLenFeature:
        import tensorflow as tf

        return tf.io.FixedLenFeature([], tf.string)

    def decode(self, parsed: tf.Tensor, *, float_pixels: bool,
               keep_float16: bool) -> tf.Tensor:
        return self._tf_finish(self._tf_stored(parsed), float_pixels=float_pixels,
                               keep_float16=keep_float16)

    def decode_clip(self, parsed: tf.Tensor, frames: tf.Tensor, *, float_pixels: bool,
                    keep_float16: bool) -> tf.Tensor:
        """The clip's frames taken before the cast: only they are converted."""
        import tensorflow as tf

        return self._tf_finish(tf.gather(self._tf_stored(parsed), frames, batch_dims=1),
                               float_pixels=float_pixels, keep_float16=keep_float16)

    def _tf_stored(self, parsed: tf.Tensor) -> tf.Tensor:
        """[batch, *shape] as stored; the batch's size stays static where it is
        (drop_remainder)."""
        import tensorflow as tf

        return tf.reshape(tf.io.decode_raw(parsed, tf.dtypes.as_dtype(self.feature.dtype),
                                           little_endian=True),
                          [parsed.shape[0] or -1, *self.feature.shape])

    def _tf_finish(self, values: tf.Tensor, *, float_pixels: bool,
                   keep_float16: bool) -> tf.Tensor:
        import tensorflow as tf

        dtype = self.feature.dtype
        if dtype in ("float16", "bfloat16") and not keep_float16:
            return tf.cast(values, tf.float32)
        if float_pixels and dtype == "uint8":
            return tf_to_unit(values)
        return values
