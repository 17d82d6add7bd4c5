"""readers/numpy/scatter.py on its own: a batch that the Decoder reads (each record's
fixed-width values read straight into their rows by offsets it computes, a clip's frames
cut out of them, the rest decoded from a small buffer) is the records decoded one by one
through readers/format and stacked. Property-based: random features (frame shapes,
dtypes, encodings, labels, metadata), windows (lengths, strides, tails, ids whose lengths
give records of one size several layouts) and batches (any order, repeats, clips, plans
learnt by an earlier batch, frames handed over in memory as a remote read hands them)."""
import os
import tempfile

import numpy as np
from format_datasets import Video, write_dataset
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from readers.clips import CLIP_OFFSET, Clip
from readers.format import PER_FRAME, tfrecord, wire
from readers.numpy.scatter import Decoder
from readers.request import SplitRequest
from readers.shards import Shards

# (frames' dtype, --frame_encoding): latents of every dtype an encoding holds (float32
# as a FloatList, int64 as an Int64List, the others raw), pixels raw, PNG or JPEG
KINDS = [("float32", None), ("int64", None), ("float16", None), ("float64", None),
         ("int16", None), ("uint8", None), ("uint8", "raw"), ("uint8", "png"),
         ("uint8", "jpeg")]


@st.composite
def datasets(draw):
    """(videos, the job's flags) of a small dataset with at least one window."""
    dtype, encoding = draw(st.sampled_from(KINDS))
    if encoding:
        frame = (draw(st.integers(1, 5)), draw(st.integers(1, 5)), draw(st.sampled_from([1, 3])))
    else:
        frame = tuple(draw(st.lists(st.integers(1, 4), max_size=2)))
    window = draw(st.integers(1, 6))
    labels = draw(st.sampled_from([None, (), (2,)]))
    metadata = draw(st.sampled_from([0, 1, 3]))
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    # the first video holds a window whatever the tail; the others may be too short
    lengths = [draw(st.integers(window, 24)), *draw(st.lists(st.integers(0, 24), max_size=4))]
    videos = []
    for i, length in enumerate(lengths):
        shape = (length, *frame)
        frames = (rng.integers(0, 256, shape) if dtype == "uint8" else
                  rng.integers(-2**40, 2**40, shape) if dtype == "int64" else
                  rng.integers(-300, 300, shape) if dtype == "int16" else
                  rng.standard_normal(shape) * 100).astype(dtype)
        # ids of 1 to 150 characters: their length's varint takes one byte or two
        name = f"v{i}" + "é" * draw(st.integers(0, 75))
        videos.append(Video(
            name, frames, rng.standard_normal(metadata).astype(np.float32) if metadata else None,
            None if labels is None else rng.standard_normal((length, *labels)).astype(np.float32)))
    flags = ["--window", window, "--stride", draw(st.integers(1, 7)),
             "--tail", draw(st.sampled_from(["align_end", "drop", "pad"])),
             "--num_shards", draw(st.integers(1, 3))]
    return videos, flags + (["--frame_encoding", encoding] if encoding else [])


def _records(path: str, request: SplitRequest) -> list[bytes]:
    """Every record of the split in order (its shards', each in turn), read by
    readers.format's TFRecord framing."""
    out = []
    for shard in request.shards:
        with open(os.path.join(path, shard.file), "rb") as f:
            while (record := tfrecord.read_frame(f)) is not None:
                assert isinstance(record, bytes), record
                out.append(record)
    return out


def _decoded(request: SplitRequest, record: bytes, **options) -> dict:
    """One record's values as readers.numpy gives them, through readers.format alone:
    its lists found by walking the Example, each value put in a column of one row by its
    codec and finished."""
    values = wire.example_values(list(request.features), record)
    out = {}
    for f in request.features:
        column = np.empty((1, *f.shape), f.codec.column_dtype)
        f.codec.store(column, 0, values[f.name])
        out[f.name] = f.codec.finish(column, **options)[0]
    return out


def _expected(rows: list[dict], indices: list[int], clip, window: int, epoch: int) -> dict:
    """The rows of `indices` stacked, each per-frame feature cut at its clip."""
    offsets = None if clip is None else clip.offsets(window, np.array(indices), epoch)
    columns = {}
    for name in rows[0]:
        values = [rows[i][name] for i in indices]
        if offsets is not None and name in PER_FRAME:
            values = [v[clip.frames(o)] for v, o in zip(values, offsets, strict=True)]
        columns[name] = np.stack(values)
    if offsets is not None:
        columns[CLIP_OFFSET] = offsets
    return columns


def _assert_equal(batch: dict, expected: dict) -> None:
    assert list(batch) == list(expected)
    for name, column in expected.items():
        assert batch[name].dtype == column.dtype, name
        assert batch[name].shape == column.shape, name
        np.testing.assert_array_equal(batch[name], column, err_msg=name)


@st.composite
def reads(draw, windows: int, window: int):
    """A batch to read: indices in any order (repeats too), a clip or none, the epoch and
    the output options."""
    indices = draw(st.lists(st.integers(0, windows - 1), min_size=1, max_size=2 * windows))
    clip = None
    if draw(st.booleans()):
        length = draw(st.integers(1, window))
        step = draw(st.integers(1, max(1, (window - 1) // max(1, length - 1))))
        clip = Clip(length, step=step, offset=draw(st.sampled_from(["random", "start",
                                                                     "center"])),
                    seed=draw(st.integers(0, 2**32 - 1)))
    return indices, clip, draw(st.integers(0, 3)), draw(st.booleans()), draw(st.booleans())


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.data())
def test_a_scattered_batch_is_its_records_decoded_one_by_one_and_stacked(data):
    videos, flags = data.draw(datasets())
    with tempfile.TemporaryDirectory() as out:
        write_dataset(out, videos, *flags)
        request = SplitRequest.load(out, "train")
        records = _records(out, request)
        window = request.spec.window.length
        shards = Shards(request)
        indices, clip, epoch, float_pixels, keep_float16 = data.draw(
            reads(len(records), window))
        options = dict(float_pixels=float_pixels, keep_float16=keep_float16)
        rows = [_decoded(request, record, **options) for record in records]
        decoder = Decoder(request.features, clip=clip, window=window, **options)
        for order in (indices, indices[::-1]):      # the second with the plans learnt
            _assert_equal(decoder.read_batch(shards, order, epoch),
                          _expected(rows, order, clip, window, epoch))
        # the frames in memory, as readers.numpy.streaming and a remote read hand them over
        spans = shards.spans([shards.locate(i) for i in indices])
        framed = [tfrecord.frame(records[i]) for i in indices]
        assert [end - start for start, end in spans] == [len(f) for f in framed]
        fresh = Decoder(request.features, clip=clip, window=window, **options)
        _assert_equal(fresh.read_batch(shards, indices, epoch, records=framed),
                      _expected(rows, indices, clip, window, epoch))
