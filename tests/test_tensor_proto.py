"""beam_jobs.sources.tensor_proto reads what TensorFlow writes, as TensorFlow reads it, and
refuses what is not a numeric TensorProto with one line."""
import numpy as np
import pytest
import tensorflow as tf
from hypothesis import given, settings
from hypothesis import strategies as st
from tensorflow.core.framework import tensor_pb2

from beam_jobs.sources.tensor_proto import DTYPES, TensorProtoError, parse_tensor

TF_DTYPES = [tf.as_dtype(name) for name in DTYPES.values()]
SHAPES = [(), (0,), (1,), (7,), (0, 3), (3, 0), (2, 3), (4, 1, 5), (2, 0, 2), (3, 2, 2, 2)]


def _same(ours: np.ndarray, theirs: np.ndarray) -> None:
    assert ours.dtype == theirs.dtype and ours.shape == theirs.shape
    assert ours.tobytes() == theirs.tobytes()


def _random(rng, shape, dtype):
    values = rng.standard_normal(shape) * 1000
    return tf.cast(tf.constant(values), dtype)


@settings(max_examples=150, deadline=None)
@given(dtype=st.sampled_from(TF_DTYPES), shape=st.sampled_from(SHAPES),
       seed=st.integers(0, 2**32 - 1))
def test_serialize_tensor_reads_back_as_tensorflow_gives_it(dtype, shape, seed):
    tensor = _random(np.random.default_rng(seed), shape, dtype)
    _same(parse_tensor(tf.io.serialize_tensor(tensor).numpy()), tensor.numpy())


@pytest.mark.parametrize("dtype", TF_DTYPES, ids=lambda d: d.name)
def test_every_dtype_and_shape_and_an_offset_into_a_buffer(dtype):
    rng = np.random.default_rng(0)
    for shape in SHAPES:
        tensor = _random(rng, shape, dtype)
        data = tf.io.serialize_tensor(tensor).numpy()
        padded = b"head" + data + b"tail"
        _same(parse_tensor(padded, 4, 4 + len(data)), tensor.numpy())


# Where TensorFlow's TensorProto keeps a dtype's values without tensor_content.
VALUE_FIELDS = {"float32": "float_val", "float64": "double_val", "int64": "int64_val",
                "bool": "bool_val", "float16": "half_val", "bfloat16": "half_val",
                "uint32": "uint32_val", "uint64": "uint64_val"}


@pytest.mark.parametrize("dtype", TF_DTYPES, ids=lambda d: d.name)
def test_the_typed_value_fields_read_as_make_ndarray_reads_them(dtype):
    """Without tensor_content a TensorProto keeps values in a typed field (float_val,
    int_val, half_val: a 16-bit float's bits, ...): a few values, the last one repeated
    up to the shape, or none for zeros."""
    rng = np.random.default_rng(1)
    for shape, count in (((3,), 3), ((2, 3), 2), ((4,), 1), ((2, 2), 0), ((), 1), ((0,), 0)):
        values = tf.cast(rng.standard_normal(count) * 100, dtype).numpy()
        if dtype.name in ("float16", "bfloat16"):
            values = values.view(np.uint16)
        proto = tensor_pb2.TensorProto(dtype=dtype.as_datatype_enum)
        for size in shape:
            proto.tensor_shape.dim.add(size=size)
        getattr(proto, VALUE_FIELDS.get(dtype.name, "int_val")).extend(values.tolist())
        _same(parse_tensor(proto.SerializeToString()), tf.make_ndarray(proto))


def test_unpacked_typed_values_read_as_protobuf_reads_them():
    """Each value its own field (what an old or foreign writer may do), not packed."""
    shape = b"\x12\x04\x12\x02\x08\x03"                      # tensor_shape { dim { size 3 } }
    floats = b"\x08\x01" + shape + b"".join(b"\x2d" + np.float32(v).tobytes() for v in (1, 2, 3))
    ints = b"\x08\x03" + shape + b"\x38\x05\x38\xff\xff\xff\xff\xff\xff\xff\xff\xff\x01\x38\x07"
    for data in (floats, ints):
        _same(parse_tensor(data), tf.make_ndarray(tensor_pb2.TensorProto.FromString(data)))


def _tf_reads(data: bytes):
    """What TensorFlow makes of the bytes: an array, or None where it refuses them."""
    try:
        return tf.make_ndarray(tensor_pb2.TensorProto.FromString(data))
    except Exception:
        return None


@settings(max_examples=300, deadline=None)
@given(dtype=st.sampled_from(TF_DTYPES), shape=st.sampled_from(SHAPES),
       cut=st.floats(0, 1), flips=st.lists(st.tuples(st.floats(0, 1), st.integers(0, 255)),
                                           max_size=3))
def test_damaged_bytes_give_tensorflows_array_or_one_clear_error(dtype, shape, cut, flips):
    data = bytearray(tf.io.serialize_tensor(_random(np.random.default_rng(2), shape,
                                                    dtype)).numpy())
    for where, value in flips:
        data[int(where * (len(data) - 1))] = value
    data = bytes(data[:int(cut * len(data))] if cut < 0.9 else data)
    try:
        ours = parse_tensor(data)
    except TensorProtoError as e:
        assert "\n" not in str(e) and str(e)
        return
    theirs = _tf_reads(data)
    assert theirs is not None, "read bytes TensorFlow refuses"
    _same(ours, theirs)


@pytest.mark.parametrize("data, reason", [
    (b"\x08\x01\x12\x04\x12\x02\x08\x03\x22\x08" + b"\0" * 8,
     "tensor_content holds 8 bytes, but float32 [3] needs 12"),
    (b"\x08\x07\x12\x00\x42\x01a", "its dtype is DT_STRING, not a numeric one"),
    (b"\x08\x08\x12\x00\x22\x08" + b"\0" * 8, "its dtype is DT_COMPLEX64"),
    (b"\x08\x63\x12\x00", "its dtype is enum 99"),
    (b"\x08\x01\x12\x02\x18\x01", "its shape has an unknown rank"),
    (b"\x08\x01\x12\x0d\x12\x0b\x08" + b"\xff" * 9 + b"\x01", "unknown or negative dim (-1)"),
    (b"\x08\x01\x12\x04\x12\x02\x08\x03\x22\x10" + b"\0" * 4, "a field runs past the end"),
    (b"\x08", "a varint runs past the end"),
    (b"\x0f", "wire type 7"),
    (b"\x0a\x01\x00", "field dtype has wire type 2"),
    (b"\x08\x01\x12\x08\x12\x06\x08\x80\x80\x80\x80\x04\x2d\x00\x00\x80\x3f",
     "would expand to 4,294,967,296 bytes"),
    (b"\x08\x01\x12\x04\x12\x02\x08\x01\x2a\x08" + b"\0" * 8,
     "it holds 2 values, but float32 [1] has 1"),
    (b"\x08\x04\x12\x00\x3a\x02\xac\x02", "a value does not fit uint8"),
])
def test_hostile_bytes_are_refused_with_one_line(data, reason):
    with pytest.raises(TensorProtoError) as error:
        parse_tensor(data)
    assert reason in str(error.value) and "\n" not in str(error.value)


@pytest.mark.parametrize("hex_bytes", [
    "080105002204aa",                   # a field numbered 0 (tag 0x05)
    "080212007a08a50bbc4db5a16740",     # variant_val (15) in a float64 tensor
    "08041204120208072a07bdf663770778bb",   # float_val (5), 7 bytes, in a uint8 tensor
    "08054a06124e12020803",             # scomplex_val (9) in an int16 tensor
])
def test_damaged_bytes_found_by_fuzzing_are_refused_as_tensorflow_refuses_them(hex_bytes):
    """Fields the parser has no use for were skipped, so these read as arrays where
    TensorFlow refuses them: a field numbered 0, or a field not of the tensor's dtype."""
    data = bytes.fromhex(hex_bytes)
    assert _tf_reads(data) is None
    with pytest.raises(TensorProtoError):
        parse_tensor(data)
