"""`tf.io.serialize_tensor`'s bytes, a TensorProto, read by hand (numpy only).

Serialized-tensor records (docs/format.md) hold their latents as TensorProtos inside
Examples. Reading them with TensorFlow made the latent job import it (seconds of start-up
per process, and a heavier Dataflow worker) for one message of a few fields: dtype (1),
tensor_shape (2) and tensor_content (4), the array's bytes in host (little-endian) order,
which is all that `serialize_tensor` writes for a numeric tensor. `tf.make_tensor_proto`
may write small tensors in the typed fields instead (float_val, int_val, half_val, ...: a
few values standing for all, the last one repeated), and `parse_tensor` reads those as
`tf.make_ndarray` does. Strings, complex numbers, quantized and other dtypes are refused.
"""
from __future__ import annotations

from typing import Optional

import numpy as np

from readers.format.wire import Buffer, message_fields, read_varint, signed

# DataType enum (tensorflow/core/framework/types.proto) -> numpy dtype name.
DTYPES = {1: "float32", 2: "float64", 3: "int32", 4: "uint8", 5: "int16", 6: "int8",
          9: "int64", 10: "bool", 14: "bfloat16", 17: "uint16", 19: "float16",
          22: "uint32", 23: "uint64"}
_REFUSED = {0: "DT_INVALID", 7: "DT_STRING", 8: "DT_COMPLEX64", 18: "DT_COMPLEX128",
            20: "DT_RESOURCE", 21: "DT_VARIANT"}
# The typed field that holds a dtype's values when there is no tensor_content, and the
# dtype its values are read as (half_val holds a 16-bit float's bits).
_VALUE_FIELDS = {"float32": (5, "<f4"), "float64": (6, "<f8"), "int32": (7, "int32"),
                 "uint8": (7, "uint8"), "int16": (7, "int16"), "int8": (7, "int8"),
                 "uint16": (7, "uint16"), "int64": (10, "int64"), "bool": (11, "bool"),
                 "float16": (13, "uint16"), "bfloat16": (13, "uint16"),
                 "uint32": (16, "uint32"), "uint64": (17, "uint64")}
# A tensor written in the short form (a few values standing for many) may expand to this.
MAX_EXPANDED_BYTES = 1 << 30
_WHAT = "a TensorProto"


class TensorProtoError(ValueError):
    """The bytes are not a TensorProto of a numeric dtype; the message says why."""


def numpy_dtype(name: str) -> np.dtype:
    """The little-endian numpy dtype of a DTYPES name (bfloat16 from ml_dtypes, which
    TensorFlow and JAX install; imported only when a tensor is bfloat16)."""
    if name == "bfloat16":
        try:
            import ml_dtypes
        except ModuleNotFoundError:
            raise TensorProtoError("a bfloat16 tensor needs the ml_dtypes package") from None
        return np.dtype(ml_dtypes.bfloat16)
    return np.dtype(name).newbyteorder("<") if name != "bool" else np.dtype(bool)


def parse_tensor(buf: Buffer, start: int = 0, end: Optional[int] = None) -> np.ndarray:
    """The array that the TensorProto buf[start:end] holds, as `tf.make_ndarray` gives it.
    Its tensor_content comes as a read-only view of `buf`, not a copy. TensorProtoError
    with a one-line reason for bytes that are not one."""
    end = len(buf) if end is None else end
    try:
        return _parse(buf, start, end)
    except IndexError:
        raise TensorProtoError(f"not {_WHAT}: a varint runs past the end") from None
    except TensorProtoError:
        raise
    except ValueError as e:     # message_fields': wire types, fields past the end
        raise TensorProtoError(str(e)) from None


def _parse(buf: Buffer, start: int, end: int) -> np.ndarray:
    dtype_enum, dims, content, values = _fields(buf, start, end)
    name = _dtype_name(dtype_enum, values)
    dtype = numpy_dtype(name)
    count = 1
    for size in dims:
        count *= size
    if content is not None and content[1] > content[0]:
        return _from_content(buf, content, name, dtype, dims, count)
    return _from_values(buf, values, name, dtype, dims, count)


def _fields(buf: Buffer, start: int, end: int
            ) -> tuple[int, list[int], Optional[tuple[int, int]], list[tuple[int, int, int, int]]]:
    """A TensorProto's dtype enum, dims, tensor_content's (first, last) if any, and its
    typed value fields (field, wire, first, last); TensorProtoError for a known field of
    the wrong wire type."""
    dtype_enum, dims, content = 0, [], None
    values: list[tuple[int, int, int, int]] = []    # (field, wire, first, last)
    for number, wire, first, last in message_fields(buf, start, end, _WHAT):
        if number == 1:
            _expect(wire, 0, "dtype")
            dtype_enum = read_varint(buf, first)[0]
        elif number == 2:
            _expect(wire, 2, "tensor_shape")
            dims += _shape(buf, first, last)
        elif number == 4:
            _expect(wire, 2, "tensor_content")
            content = (first, last)
        elif number >= 5:
            values.append((number, wire, first, last))
    return dtype_enum, dims, content, values


def _dtype_name(dtype_enum: int, values: list[tuple[int, int, int, int]]) -> str:
    """The numeric dtype's name; TensorProtoError for one this reader does not know, or
    a value field that is not that dtype's."""
    name = DTYPES.get(dtype_enum)
    if name is None:
        raise TensorProtoError(f"its dtype is {_REFUSED.get(dtype_enum, f'enum {dtype_enum}')}"
                               ", not a numeric one this reader knows")
    own_field = _VALUE_FIELDS[name][0]
    for number, *_ in values:
        if number != own_field:   # TF would parse it (and may refuse it); it is not ours
            raise TensorProtoError(f"not {_WHAT}: field {number} is not a field of a {name} "
                                   "tensor")
    return name


def _from_content(buf: Buffer, content: tuple[int, int], name: str, dtype: np.dtype,
                  dims: list[int], count: int) -> np.ndarray:
    """The long form: tensor_content's bytes as the array, a view of `buf`;
    TensorProtoError unless they are exactly the dims' values."""
    size = content[1] - content[0]
    if size != count * dtype.itemsize:
        raise TensorProtoError(f"tensor_content holds {size} bytes, but {name} "
                               f"{dims} needs {count * dtype.itemsize}")
    return np.frombuffer(buf, dtype, count, content[0]).reshape(dims)

def _expect(wire: int, expected: int, name: str) -> None:
    if wire != expected:
        raise TensorProtoError(f"not {_WHAT}: field {name} has wire type {wire}")


def _shape(buf: Buffer, start: int, end: int) -> list[int]:
    """The dims of a TensorShapeProto: dim (2) messages with size (1); unknown_rank (3)."""
    dims = []
    for number, wire, first, last in message_fields(buf, start, end, _WHAT):
        if number == 3 and wire == 0 and read_varint(buf, first)[0]:
            raise TensorProtoError("its shape has an unknown rank")
        if number != 2:
            continue
        _expect(wire, 2, "tensor_shape.dim")
        size = 0
        for dim_number, dim_wire, dim_first, _ in message_fields(buf, first, last, _WHAT):
            if dim_number == 1:
                _expect(dim_wire, 0, "tensor_shape.dim.size")
                size = signed(read_varint(buf, dim_first)[0])
        if size < 0:
            raise TensorProtoError(f"its shape has an unknown or negative dim ({size})")
        dims.append(size)
    return dims


def _from_values(buf: Buffer, fields: list, name: str, dtype: np.dtype, dims: list[int],
                 count: int) -> np.ndarray:
    """The short form: the typed field's values, the last one repeated up to `count`
    (none: zeros), as tf.make_ndarray reads them."""
    number, carrier_name = _VALUE_FIELDS[name]
    carrier = np.dtype(carrier_name)
    if count * dtype.itemsize > MAX_EXPANDED_BYTES:
        raise TensorProtoError(f"{name} {dims} without tensor_content would expand to "
                               f"{count * dtype.itemsize:,} bytes, more than "
                               f"{MAX_EXPANDED_BYTES:,}")
    chunks = [_values_of(buf, number, wire, first, last, carrier)
              for field_number, wire, first, last in fields if field_number == number]
    stored = np.concatenate(chunks) if chunks else np.zeros(0, carrier)
    if stored.size > count:
        raise TensorProtoError(f"it holds {stored.size} values, but {name} {dims} has "
                               f"{count}")
    if stored.size == 0:
        return np.zeros(dims, dtype)
    if stored.size < count:
        stored = np.pad(stored, (0, count - stored.size), "edge")
    if name in ("float16", "bfloat16"):
        return stored.view(dtype).reshape(dims)
    return stored.astype(dtype, copy=False).reshape(dims)


def _values_of(buf: Buffer, number: int, wire: int, first: int, last: int,
               carrier: np.dtype) -> np.ndarray:
    """The values of one typed field: fixed-width floats (one, or packed) or varints;
    TensorProtoError for another wire type, or a part of a value."""
    if carrier.kind == "f":          # fixed width: one value, or packed
        if wire not in (2, 1 if carrier.itemsize == 8 else 5):
            raise TensorProtoError(f"not {_WHAT}: field {number} has wire type {wire}")
        if (last - first) % carrier.itemsize:
            raise TensorProtoError(f"not {_WHAT}: field {number} holds a part of a value")
        return np.frombuffer(buf, carrier, (last - first) // carrier.itemsize, first)
    if wire in (0, 2):               # varints: one value, or packed
        return _varints(buf, first, last if wire == 2 else None, carrier)
    raise TensorProtoError(f"not {_WHAT}: field {number} has wire type {wire}")


def _varints(buf: Buffer, pos: int, end: Optional[int], carrier: np.dtype) -> np.ndarray:
    """One varint at `pos` (end None), or the packed varints of buf[pos:end], as `carrier`
    (int32 and smaller ints are written sign-extended to 64 bits)."""
    values = []
    while end is None or pos < end:
        value, pos = read_varint(buf, pos)
        values.append(signed(value) if carrier.kind == "i" else value)
        if end is None:
            break
    if end is not None and pos != end:
        raise TensorProtoError(f"not {_WHAT}: packed values run past their field")
    try:
        return np.array(values, carrier)
    except OverflowError:
        raise TensorProtoError(f"a value does not fit {carrier.name}") from None
