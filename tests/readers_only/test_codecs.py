"""Each encoding's codec, TFRecord framing and the offset index, on their own: a value
through the wire and back as each reader gives it (the tf.data reader's where TensorFlow
is installed)."""
import io

import numpy as np
import pytest
from PIL import Image

from readers import format as data_format
from readers.format import index, tfrecord


def _png(frame: np.ndarray) -> bytes:
    out = io.BytesIO()
    Image.fromarray(frame).save(out, format="PNG")
    return out.getvalue()


def _jpeg(frame: np.ndarray) -> bytes:
    out = io.BytesIO()
    Image.fromarray(frame).save(out, format="JPEG", quality=90)
    return out.getvalue()


rng = np.random.default_rng(0)
# smooth frames (what a JPEG keeps): a gradient per frame and channel
FRAMES = (np.arange(3)[:, None, None, None] * 40 + np.arange(8)[:, None, None] * 9
          + np.arange(8)[:, None] * 5 + np.arange(3) * 30).astype(np.uint8)
CASES = [   # (feature, value, what the readers give by default)
    (data_format.FeatureSpec("x", (2, 3), "float32", "float"),
     rng.standard_normal((2, 3)).astype(np.float32), None),
    (data_format.FeatureSpec("x", (4,), "int64", "int64"), np.array([0, -1, 2**40, -2**63]),
     None),
    (data_format.FeatureSpec("x", (), "int64", "int64"), np.int64(-300), None),
    (data_format.FeatureSpec("x", (), "string", "bytes"), "vidéo".encode(), None),
    (data_format.FeatureSpec("x", (2, 2), "float16", "raw"),
     np.array([[1.5, -2], [65504, 0.001]], np.float16), "float32"),
    (data_format.FeatureSpec("x", (3,), "bfloat16", "raw"),
     np.array([1.5, -2, 3e38], np.float32), "float32"),
    (data_format.FeatureSpec("x", (2,), "float64", "raw"), np.array([1e300, -0.1]), None),
    (data_format.FeatureSpec("x", (3, 8, 8, 3), "uint8", "raw"), FRAMES, None),
    (data_format.FeatureSpec("x", (3, 8, 8, 3), "uint8", "png"), [_png(f) for f in FRAMES],
     FRAMES),
    (data_format.FeatureSpec("x", (3, 8, 8, 3), "uint8", "jpeg"), [_jpeg(f) for f in FRAMES],
     None),
]
IDS = [f"{f.encoding}-{f.dtype}-{len(f.shape)}d" for f, _, _ in CASES]


def _encoded(f: data_format.FeatureSpec, value) -> bytes:
    """`value` as an example of feature `f` alone; a bfloat16 value needs ml_dtypes (which
    TensorFlow installs) to be written, and to be read as bfloat16 (`keep_float16`)."""
    if f.dtype == "bfloat16":
        pytest.importorskip("ml_dtypes", reason="bfloat16 arrays need ml_dtypes")
    return data_format.encode_example([f], {f.name: value})


def _numpy_read(f: data_format.FeatureSpec, example: bytes, **options) -> np.ndarray:
    """One example's value as readers.numpy gets it: straight from its bytes when the
    codec stores a plain array, else through the list message; into a column; finished."""
    column = np.empty((1, *f.shape), f.codec.column_dtype)
    layout = data_format.layout([f], example)
    if layout.direct:
        _, first, last = layout.direct[0]
        column.reshape(1, -1).view(np.uint8)[0] = np.frombuffer(example, np.uint8)[first:last]
    else:
        f.codec.store(column, 0, layout.values([f], example)[f.name])
    return f.codec.finish(column, **options)[0]


def _tf_read(f: data_format.FeatureSpec, example: bytes, **options) -> np.ndarray:
    """As readers.make_dataset gets it: in a traced function, as tf.data runs its parse
    (through AutoGraph, which converts the codec's methods)."""
    import tensorflow as tf

    parse = tf.function(lambda records: f.codec.decode(tf.io.parse_example(
        records, {f.name: f.codec.parse_feature()})[f.name], **options))
    return parse(tf.constant([example])).numpy()[0]


@pytest.mark.parametrize("f,value,given", CASES, ids=IDS)
def test_each_codec_gives_the_tf_reader_the_numpy_readers_value(f, value, given):
    pytest.importorskip("tensorflow", reason="the tf.data reader needs TensorFlow")
    example = _encoded(f, value)
    for options in ({"float_pixels": False, "keep_float16": False},
                    {"float_pixels": True, "keep_float16": True}):
        ours, theirs = _numpy_read(f, example, **options), _tf_read(f, example, **options)
        if f.encoding == "bytes":
            assert ours == theirs == value
            continue
        assert ours.dtype == theirs.dtype and ours.shape == theirs.shape == f.shape
        # pixels / 255 may differ in the last bit: traced (not eagerly), TensorFlow rounds
        # some quotients otherwise than numpy, as the readers did before codecs
        np.testing.assert_allclose(ours.astype(np.float64), theirs.astype(np.float64),
                                   rtol=2**-23 if options["float_pixels"] else 0)


@pytest.mark.parametrize("f,value,given", CASES, ids=IDS)
def test_each_codec_gives_the_numpy_reader_the_value(f, value, given):
    example = _encoded(f, value)
    assert bool(data_format.layout([f], example).direct) == (f.codec.stored_dtype is not None)
    plain = _numpy_read(f, example, float_pixels=False, keep_float16=False)
    if f.encoding == "bytes":
        assert plain == value
    elif f.encoding == "jpeg":   # lossy: near the frames, the same in both readers
        assert np.abs(plain.astype(int) - FRAMES).mean() < 4
    elif f.dtype == "bfloat16":  # bfloat16 keeps 8 bits of mantissa
        np.testing.assert_allclose(plain, value, rtol=2**-8)
    else:
        np.testing.assert_array_equal(plain, value if given is None or isinstance(given, str)
                                      else given)
        assert plain.dtype == np.dtype(given if isinstance(given, str) else f.codec.column_dtype)


@pytest.mark.parametrize("f,value,given", CASES, ids=IDS)
def test_float_pixels_and_keep_float16(f, value, given):
    example = _encoded(f, value)
    kept = _numpy_read(f, example, float_pixels=True, keep_float16=True)
    if f.dtype == "uint8":
        assert kept.dtype == np.float32 and 0 <= kept.min() and kept.max() <= 1
    elif f.dtype in ("float16", "bfloat16"):
        assert str(kept.dtype) == f.dtype


def test_stored_as_tells_other_readers_the_layout():
    float16 = data_format.FeatureSpec("window", (4, 2), "float16", "raw")
    assert float16.codec.stored_as() == {
        "list": "bytes_list", "values": 1, "value_dtype": "float16", "byte_order": "little",
        "order": "row-major (C) flattening of shape", "content": "the array's bytes"}
    jpeg = data_format.FeatureSpec("window", (5, 4, 4, 3), "uint8", "jpeg").codec.stored_as()
    assert jpeg["values"] == 5 and jpeg["decoded_shape"] == [4, 4, 3] and "jpeg_dct" in jpeg
    assert "jpeg_dct" not in data_format.FeatureSpec("w", (5, 4, 4, 3), "uint8",
                                                     "png").codec.stored_as()
    assert data_format.FeatureSpec("mask", (5,), "float32", "float").codec.stored_as()[
        "values"] == 5


def test_an_unknown_encoding_is_refused_and_every_encoding_has_a_codec():
    with pytest.raises(ValueError, match="unknown encoding 'gif'"):
        data_format.FeatureSpec("x", (1,), "uint8", "gif")
    assert set(data_format.ENCODINGS) == {e for f, _, _ in CASES for e in [f.encoding]}
    assert data_format.IMAGE_ENCODINGS == ("png", "jpeg")


def test_a_list_of_the_wrong_kind_is_an_error():
    f = data_format.FeatureSpec("x", (2,), "float32", "float")
    wrong = data_format.FeatureSpec("x", (2,), "int64", "int64")
    example = data_format.encode_example([wrong], {"x": np.array([1, 2])})
    with pytest.raises(ValueError, match="feature 'x' is a int64 list, not float"):
        data_format.layout([f], example).values([f], example)


def test_frames_read_back_and_a_bad_crc_loses_one_record():
    records = [b"", b"one", bytes(range(256)) * 3]
    data = b"".join(map(tfrecord.frame, records))
    assert len(data) == sum(map(len, records)) + len(records) * tfrecord.FRAME_OVERHEAD
    assert tfrecord.frame(b"abc")[:tfrecord.HEADER_BYTES] == tfrecord.header(3)
    f = io.BytesIO(data)
    assert [tfrecord.read_frame(f) for _ in range(4)] == records + [None]
    broken = bytearray(data)
    broken[tfrecord.FRAME_OVERHEAD + tfrecord.HEADER_BYTES] ^= 1     # record 1's data
    f = io.BytesIO(bytes(broken))
    read = [tfrecord.read_frame(f) for _ in range(4)]
    assert read[0] == b"" and read[2:] == [records[2], None]
    assert read[1] == tfrecord.Lost("a record's data fails its CRC", 1, 19, False)
    f = io.BytesIO(data[:-1])
    assert [tfrecord.read_frame(f) for _ in range(2)][1] == b"one"
    assert tfrecord.read_frame(f).framing


def test_the_index_round_trips_and_names_its_file_when_wrong():
    records = [b"a" * 5, b"", b"b" * 300]
    shard = b"".join(map(tfrecord.frame, records))
    offsets = [0, 21, 37, len(shard)]
    data = index.encode(offsets)
    assert data == f"0 21\n21 16\n37 {len(shard) - 37}\n".encode()   # what tfrecord2idx writes
    decoded = index.decode(data, "s.index", 3, index.TEXT_SINCE, len(shard))
    assert decoded.tolist() == offsets
    index.verify("s.index", decoded, io.BytesIO(shard))
    with pytest.raises(ValueError, match="^s.index: 3 records indexed, dataset.json says 4$"):
        index.decode(data, "s.index", 4, index.TEXT_SINCE)
    with pytest.raises(ValueError, match=f"^s.index: ends at byte {len(shard)}, the shard "
                                         f"has {len(shard) + 1}$"):
        index.decode(data, "s.index", 3, index.TEXT_SINCE, len(shard) + 1)
    moved = np.array([0, 20, 37, len(shard)])
    with pytest.raises(ValueError, match="^s.index: record 0 at byte 0 does not match the "
                                         "shard$"):
        index.verify("s.index", moved, io.BytesIO(shard))
    assert index.decode(b"", "s.index", 0, index.TEXT_SINCE, 0).tolist() == [0]


def test_the_binary_index_of_format_versions_1_and_2_still_reads():
    offsets = [0, 21, 37, 353]
    data = np.array(offsets, "<u8").tobytes()
    for version in (1, 2):
        assert index.decode(data, "s.index", 3, version, 353).tolist() == offsets
    with pytest.raises(ValueError, match="^s.index: 31 bytes, not a whole number"):
        index.decode(data[:-1], "s.index", 3, 2)
    with pytest.raises(ValueError, match="^s.index: record 1 spans bytes"):
        index.decode(np.array([0, 21, 21, 353], "<u8").tobytes(), "s.index", 3, 2)


@pytest.mark.parametrize("text, needle", [
    (b"0 21\n21 16\n37", "line 3: '37' is not 'offset length'"),            # a field missing
    (b"0 21\n21 16\n37 16", "line 3: '37 16' does not end with a newline"),
    (b"0 21\n21 1x\n37 16\n", "line 2: '21 1x' is not 'offset length'"),     # not a digit
    (b"0 21\n21 -16\n37 16\n", "line 2: '21 -16' is not"),                  # negative
    (b"0 21\n21 +16\n37 16\n", "line 2: '21 +16' is not"),
    (b"0 21\n21 " + b"9" * 30 + b"\n37 16\n", "line 2: '21 " + "9" * 30),   # huge
    (b"0 21\n21 9223372036854775808\n37 16\n", "line 2: '21 9223372036854775808' is not"),
    (b"0 21\r\n21 16\r\n37 16\r\n", "line 1: '0 21\\r' is not"),
    (b"0  21\n21 16\n37 16\n", "line 1: '0  21' is not"),
    (b"0 21\n021 16\n37 16\n", "line 2: '021 16' is not"),                 # a leading zero
    (b"0 21\n\n21 16\n37 16\n", "line 2: '' is not"),
    (b"0 21\n21 16\n", "2 records indexed, dataset.json says 3"),
    (b"0 21\n21 16\n37 16\n53 16\n", "4 records indexed, dataset.json says 3"),
    (b"0 21\n21 17\n37 16\n", "line 2: the frame at byte 21 of 17 bytes ends at 38, line 3 "
                                "starts at 37"),
    (b"0 21\n37 16\n21 16\n", "line 1: the frame at byte 0 of 21 bytes ends at 21, line 2"),
    (b"5 16\n21 16\n37 16\n", "record 0 starts at byte 5, not 0"),
    (b"0 21\n21 0\n21 32\n", "record 1 spans bytes [21, 21), where a record"),
    (b"0 21\n21 16\n37 3000000000\n", "ends at byte 3000000037, the shard has 53"),
    (b"9" * (1 << 20), "1048576 bytes, more than the 3 'offset length' lines"),
])
def test_a_malformed_text_index_is_one_line_naming_it_and_the_line(text, needle):
    with pytest.raises(ValueError) as raised:
        index.decode(text, "s.index", 3, index.TEXT_SINCE, 53)
    assert str(raised.value).startswith(f"s.index: {needle}"), str(raised.value)
    assert "\n" not in str(raised.value)
