"""The hand-written Example encoder against TensorFlow's own serialization."""
import numpy as np
import pytest
import tensorflow as tf

from readers import format as data_format


def _tf_example(features, values) -> bytes:
    feature = {}
    for f in features:
        value = values[f.name]
        if f.encoding == "bytes":
            feature[f.name] = tf.train.Feature(bytes_list=tf.train.BytesList(value=[value]))
        elif f.encoding in data_format.IMAGE_ENCODINGS:
            feature[f.name] = tf.train.Feature(bytes_list=tf.train.BytesList(value=value))
        elif f.encoding == "float":
            feature[f.name] = tf.train.Feature(float_list=tf.train.FloatList(
                value=np.asarray(value, np.float32).ravel().tolist()))
        elif f.encoding == "int64":
            feature[f.name] = tf.train.Feature(int64_list=tf.train.Int64List(
                value=np.asarray(value).ravel().tolist()))
        else:
            feature[f.name] = tf.train.Feature(bytes_list=tf.train.BytesList(
                value=[np.asarray(value, f.dtype).astype(np.dtype(f.dtype).newbyteorder("<"))
                       .tobytes()]))
    example = tf.train.Example(features=tf.train.Features(feature=feature))
    return example.SerializeToString(deterministic=True)


@pytest.mark.parametrize("window", [
    data_format.FeatureSpec.for_array("window", (5, 3), "float32"),
    data_format.FeatureSpec.for_array("window", (5, 2, 2), "float16"),
    data_format.FeatureSpec.for_array("window", (5,), "float64"),
    data_format.FeatureSpec("window", (5, 4, 4, 1), "uint8", "raw"),
    data_format.FeatureSpec("window", (5, 4, 4, 3), "uint8", "jpeg"),
])
def test_encode_example_is_tensorflow_s_deterministic_serialization(window):
    """One encoder serves every example of its features (each fixed-width feature's
    framing worked out once, the rest per example), and so does `encode_example`."""
    rng = np.random.default_rng(0)
    features = data_format.window_features(window, metadata_length=4, label_shape=(2,))
    encode = data_format.ExampleEncoder(features)
    for start in (0, 7, 2**40, -3):
        values = {"mask": np.array([1, 1, 0, 1, 0], np.float32),
                  "labels": rng.standard_normal((5, 2)), "metadata": rng.random(4),
                  "video_id": "vidéo-1:2".encode(), "start": np.int64(start)}
        if window.encoding == "jpeg":
            values["window"] = [bytes(rng.integers(0, 255, n, dtype=np.uint8))
                                for n in (0, 1, 127, 128, 300)]
        elif window.dtype == "uint8":
            values["window"] = rng.integers(0, 255, window.shape, np.uint8)
        else:
            values["window"] = rng.standard_normal(window.shape).astype(window.dtype)
        ours = encode(values)
        assert ours == _tf_example(features, values)
        assert encode.frame_size(values) == len(ours) + 16   # what --shuffle place plans by
        assert data_format.encode_example(features, values) == ours
        parsed = tf.io.parse_example([ours], {f.name: f.codec.parse_feature() for f in features})
        assert int(parsed["start"][0]) == start


def test_a_feature_of_no_values_is_framed_as_tensorflow_frames_it():
    """A fixed-width feature of shape [0] (an empty packed list: no inner field) and one
    of zero raw bytes (an inner field of length 0)."""
    features = [data_format.FeatureSpec("none", (0,), "float32", "float"),
                data_format.FeatureSpec("raw", (0, 2), "uint8", "raw"),
                data_format.FeatureSpec("x", (2,), "float32", "float")]
    values = {"none": np.zeros(0, np.float32), "raw": np.zeros((0, 2), np.uint8),
              "x": np.array([1.5, -2], np.float32)}
    assert data_format.ExampleEncoder(features)(values) == _tf_example(features, values)


def test_encode_example_refuses_a_value_of_another_shape():
    features = data_format.window_features(data_format.FeatureSpec.for_array("window", (2, 3),
                                                                       "float32"))
    values = {"window": np.zeros((3, 3)), "mask": np.ones(2), "video_id": b"v",
              "start": np.int64(0)}
    with pytest.raises(ValueError, match="shape"):
        data_format.encode_example(features, values)


def test_a_layout_tells_apart_records_of_one_size_and_other_layouts():
    """Records of one size with their lists in other places (a longer id, a shorter start
    varint) must not fit each other's layout; each reads back its own values."""
    features = data_format.window_features(data_format.FeatureSpec.for_array("window", (2, 3),
                                                                       "float32"))
    rng = np.random.default_rng(3)
    rows = [{"window": rng.standard_normal((2, 3)).astype(np.float32),
             "mask": rng.random(2).astype(np.float32), "video_id": b"v" * (i % 3),
             "start": np.int64([2**14, 300, 20][i % 3])} for i in range(30)]
    records = [data_format.encode_example(features, row) for row in rows]
    assert len(set(map(len, records))) == 1 and len(set(records)) == len(records)
    layouts = [data_format.layout(features, bytearray(b"xx" + record), 2) for record in records]
    assert {name for name, _, _ in layouts[0].direct} == {"window", "mask"}
    for i, (row, record, layout) in enumerate(zip(rows, records, layouts, strict=True)):
        others = [f for f in features if f.name in layout.lists]
        for j, other in enumerate(layouts):
            rest = _rest(record, other)
            assert other.fits(rest) == (i % 3 == j % 3)
        rest = _rest(record, layout)
        values = layout.values(others, bytearray(b"x" + rest), 1)
        assert values["video_id"] == row["video_id"]
        assert int(values["start"][()]) == row["start"]
        for name, first, last in layout.direct:
            np.testing.assert_array_equal(np.frombuffer(record[first:last], "<f4").reshape(
                row[name].shape), row[name])


def _rest(record: bytes, layout: data_format.Layout) -> bytes:
    """The record without its direct features' values."""
    cuts = [(first, last) for _, first, last in layout.direct]
    starts = [0] + [last for _, last in cuts]
    ends = [first for first, _ in cuts] + [len(record)]
    return b"".join(record[a:b] for a, b in zip(starts, ends, strict=True))
