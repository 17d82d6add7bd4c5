"""Window planning rules, and a window's padded values, as properties."""
import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from beam_jobs.cut.windows import stream_windows
from readers.format.windows import window_starts
from readers.format.writer import window_values

frames = st.integers(0, 400)
lengths = st.integers(1, 120)
strides = st.integers(1, 150)


@pytest.mark.parametrize("tail, count, last", [("drop", 15, 700), ("align_end", 16, 732),
                                               ("pad", 16, 750)])
def test_832_frames_in_windows_of_100_every_50_per_tail(tail, count, last):
    starts = window_starts(832, 100, 50, tail)
    assert len(starts) == count and starts[-1] == last
    last_start, last_frames = list(stream_windows(range(832), 100, 50, tail))[-1]
    assert last_start == last and len(last_frames) == (82 if tail == "pad" else 100)


@given(frames, lengths, strides, st.sampled_from(["drop", "align_end", "pad"]))
def test_starts_increase_strictly_and_stay_in_the_sequence(t, length, stride, tail):
    starts = window_starts(t, length, stride, tail)
    assert all(a < b for a, b in zip(starts, starts[1:], strict=False))
    assert all(0 <= s < t for s in starts)
    if tail != "pad":
        assert all(s + length <= t for s in starts)


@given(frames, lengths, strides)
def test_drop_counts_full_windows_on_the_grid(t, length, stride):
    starts = window_starts(t, length, stride, "drop")
    assert starts == [s for s in range(0, max(t, 1), stride) if s + length <= t]


@given(frames, lengths, strides)
def test_align_end_adds_one_window_ending_at_the_last_frame(t, length, stride):
    drop = window_starts(t, length, stride, "drop")
    starts = window_starts(t, length, stride, "align_end")
    if t < length:
        assert starts == []
    else:
        assert starts[-1] == t - length
        assert starts[:len(drop)] == drop and len(starts) - len(drop) in (0, 1)


@given(frames, lengths, strides)
def test_pad_reaches_the_end_with_one_window_at_most_past_it(t, length, stride):
    starts = window_starts(t, length, stride, "pad")
    if t == 0:
        assert starts == []
        return
    assert starts == list(range(0, starts[-1] + 1, stride))
    if t <= length:
        assert starts == [0]
    past_end = [s for s in starts if s + length > t]
    assert len(past_end) <= 1
    if stride <= length:
        assert starts[-1] + length >= t


@given(frames, lengths, st.integers(1, 120), st.sampled_from(["align_end", "pad"]))
def test_every_frame_is_covered_when_windows_overlap_or_touch(t, length, stride, tail):
    stride = min(stride, length)
    starts = window_starts(t, length, stride, tail)
    covered = np.zeros(t, bool)
    for s in starts:
        covered[s:s + length] = True
    if tail == "pad" or t >= length:
        assert covered.all()


@given(frames, lengths, strides, st.sampled_from(["drop", "align_end", "pad"]))
def test_streamed_windows_are_the_planned_slices(t, length, stride, tail):
    got = list(stream_windows(iter(range(t)), length, stride, tail))
    assert [s for s, _ in got] == window_starts(t, length, stride, tail)
    for start, window in got:
        assert window == list(range(start, min(start + length, t)))


def test_bad_arguments_are_refused():
    with pytest.raises(ValueError):
        window_starts(10, 0, 1, "drop")
    with pytest.raises(ValueError):
        window_starts(10, 5, 0, "drop")
    with pytest.raises(ValueError):
        window_starts(10, 5, 1, "wrap")


@given(st.integers(1, 12), st.integers(0, 11), st.booleans())
def test_window_values_pad_the_frames_and_mask_what_is_real(length, missing, labelled):
    real = max(1, length - missing)
    frames = np.arange(real * 3, dtype=np.float32).reshape(real, 3) + 1
    labels = frames[:, :1] * 2 if labelled else None
    values = window_values(frames, length, labels=labels)
    assert values["window"].shape == (length, 3)
    assert np.array_equal(values["window"][:real], frames)
    assert not values["window"][real:].any()
    assert values["mask"].dtype == np.float32
    assert values["mask"].tolist() == [1.0] * real + [0.0] * (length - real)
    if labelled:
        assert values["labels"].tolist() == [[2 * f] for f in frames[:, 0]] + [[0.0]] * (
            length - real)
    else:
        assert "labels" not in values


def test_window_values_keep_encoded_frames_a_list_and_mask_bad_frames_out():
    values = window_values([b"a", b"b"], 4, valid=[True, False], pad_frame=b"z")
    assert values["window"] == [b"a", b"b", b"z", b"z"]
    assert values["mask"].tolist() == [1.0, 0.0, 0.0, 0.0]
    full = np.ones((4, 2), np.float32)
    assert window_values(full, 4)["window"] is full   # a full slice is not copied


def test_window_values_pad_a_sequence_of_scalar_frames():
    values = window_values(np.array([1.0, 2.0], np.float32), 3)
    assert values["window"].tolist() == [1.0, 2.0, 0.0]
    assert values["window"].dtype == np.float32


def test_window_values_refuse_to_pad_encoded_frames_without_their_pad_frame():
    with pytest.raises(ValueError, match="pad_frame"):
        window_values([b"a"], 2)
