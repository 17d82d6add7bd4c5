"""Clips sampled at read time (readers.clips) in both readers: the stored window's frames,
mask and labels cut alike, offsets fixed or random per (seed, epoch, window), resumable."""
import re

import numpy as np
import pytest
from PIL import Image

import readers
from helpers import assert_verified, random_videos, run_job, write_videos
from readers.clips import Clip
from readers.numpy import EpochBatches, WindowSource, batches

PER_FRAME = ("window", "mask", "labels")
CLIPS = [Clip(2, step=2), Clip(3), Clip(2, step=3, offset="center"), Clip(1, offset="start"),
         Clip(4, offset="center")]


def _assert_clips_of(whole: dict, clipped: dict, clip: Clip, window: int) -> None:
    """Each row of `clipped` is its window of `whole` cut at its clip_offset."""
    offsets = clipped["clip_offset"]
    assert offsets.dtype == np.int64 and len(offsets) == len(whole["start"])
    assert ((0 <= offsets) & (offsets <= window - clip.span)).all()
    for name, values in whole.items():
        if name in PER_FRAME:
            expected = np.stack([v[clip.frames(o)] for v, o in zip(values, offsets)])
            assert clipped[name].shape == (len(values), clip.length, *values.shape[2:])
            np.testing.assert_array_equal(clipped[name], expected, err_msg=name)
        else:
            np.testing.assert_array_equal(clipped[name], values, err_msg=name)


@pytest.mark.parametrize("kind", ["latent", "float16", "long", "raw", "png", "jpeg"])
def test_a_clip_is_its_stored_windows_frames_mask_and_labels(kinds, kind):
    whole_source = WindowSource(kinds[kind], "train")
    window = whole_source.spec.window["length"]
    whole = whole_source.read_batch(slice(None))
    for clip in CLIPS:
        for epoch in (0, 3):
            source = WindowSource(kinds[kind], "train", clip=clip, epoch=epoch)
            _assert_clips_of(whole, source.read_batch(slice(None)), clip, window)
    if kind == "raw":
        assert "labels" in whole      # the manifest's videos have per-frame labels


def test_fixed_offsets_are_the_start_and_the_center(kinds):
    source = WindowSource(kinds["latent"], "train", clip=Clip(2, offset="center"))
    assert set(source.read_batch(slice(None))["clip_offset"]) == {1}      # room 3
    source = WindowSource(kinds["latent"], "train", clip=Clip(2, step=2, offset="start"))
    assert set(source.read_batch(slice(None))["clip_offset"]) == {0}


def test_random_offsets_are_a_pure_function_of_seed_epoch_and_window(kinds):
    path = kinds["long"]
    clip = Clip(2)
    source = WindowSource(path, "train", clip=clip)
    offsets = source.read_batch(slice(None))["clip_offset"]
    assert set(offsets) == {0, 1, 2}                  # every place a clip can start
    again = WindowSource(path, "train", clip=clip).read_batch(slice(None))["clip_offset"]
    np.testing.assert_array_equal(offsets, again)
    reversed_order = source.read_batch(np.arange(len(source))[::-1])["clip_offset"]
    np.testing.assert_array_equal(offsets, reversed_order[::-1])   # per window, any order
    other_epoch = source.for_epoch(1).read_batch(slice(None))["clip_offset"]
    other_seed = WindowSource(path, "train", clip=Clip(2, seed=1)).read_batch(
        slice(None))["clip_offset"]
    assert (offsets != other_epoch).mean() > 0.4 and (offsets != other_seed).mean() > 0.4
    assert source.epoch == 0 and source.for_epoch(1).epoch == 1


def test_batches_with_clips_resume_at_a_step_and_match_a_sampler(kinds):
    path, clip = kinds["png"], Clip(2, step=2)
    straight = list(batches(path, "train", 2, seed=4, epoch=2, clip=clip))
    resumed = list(batches(path, "train", 2, seed=4, epoch=2, clip=clip, start_step=1))
    assert len(straight) > 1
    for ours, theirs in zip(straight[1:], resumed):
        for name in ours:
            np.testing.assert_array_equal(ours[name], theirs[name])
    source = WindowSource(path, "train", clip=clip)
    plan = EpochBatches(source, 2, seed=4, epoch=2)
    assert plan.source.epoch == 2 and source.epoch == 0
    for step, batch in enumerate(straight):
        read = plan.source.read_batch(plan.batch(step))
        np.testing.assert_array_equal(read["window"], batch["window"])
    # a plan resumed from its state, on a new source, reads the epoch's clips too
    again = EpochBatches.resume(WindowSource(path, "train", clip=clip), plan.state(1))
    for ours, step in zip(straight[1:], again):
        read = again.source.read_batch(step)
        for name in ("window", "clip_offset"):
            np.testing.assert_array_equal(read[name], ours[name])


def test_encoded_frames_a_clip_skips_are_never_decoded(kinds, monkeypatch):
    source = WindowSource(kinds["png"], "train", clip=Clip(1, offset="start"))
    opened = []
    real_open = Image.open
    monkeypatch.setattr(Image, "open", lambda *a, **k: opened.append(1) or real_open(*a, **k))
    source.read_batch(slice(None))
    assert len(opened) == len(source)                 # one frame a window, of 4 stored


def test_clips_that_cannot_be_cut_are_refused_in_one_line(kinds):
    for bad, error, says in [(dict(length=0), ValueError, "length must be a whole number >= 1"),
                             (dict(length=2, step=1.5), TypeError, "step must be a whole number"),
                             (dict(length=2, offset="middle"), ValueError,
                              "offset must be one of random")]:
        with pytest.raises(error, match=says):
            Clip(**bad)
    with pytest.raises(ValueError, match=r"a clip of 3 frames every 2 spans 5 frames, more "
                                         r"than the dataset's windows hold \(4\)"):
        WindowSource(kinds["latent"], "train", clip=Clip(3, step=2))
    with pytest.raises(ValueError, match="epoch must be a whole number >= 0"):
        WindowSource(kinds["latent"], "train").for_epoch(-1)


def test_a_clip_of_small_numpy_integers_spans_what_python_counts(kinds):
    """In uint8, 7 * 37 + 1 wraps to 4: a clip of 8 frames every 37 seemed to fit a
    window of 4, and readers.numpy gave uninitialised memory for 7 of its frames."""
    wide = Clip(np.uint8(8), step=np.uint8(37))
    assert wide.span == 260 and type(wide.span) is int
    says = r"a clip of 8 frames every 37 spans 260 frames, more than the dataset's windows"
    with pytest.raises(ValueError, match=says):
        WindowSource(kinds["png"], "train", clip=wide)
    with pytest.raises(ValueError, match=says):
        readers.make_dataset(kinds["png"], "train", batch_size=2, clip=wide)
    small = Clip(np.uint8(2), step=np.int16(2), seed=np.uint32(3))
    assert small == Clip(2, step=2, seed=3)
    ours = WindowSource(kinds["png"], "train", clip=small).read_batch(slice(None))
    theirs = WindowSource(kinds["png"], "train", clip=Clip(2, step=2, seed=3)).read_batch(
        slice(None))
    for name in theirs:
        np.testing.assert_array_equal(ours[name], theirs[name], err_msg=name)


@pytest.mark.parametrize("seed, error", [(2 ** 32, ValueError), (2 ** 64, ValueError),
                                         (-1, ValueError), ("abc", TypeError),
                                         (None, TypeError), (float("nan"), TypeError),
                                         (1.5, TypeError), (True, TypeError)])
def test_a_clip_seed_outside_32_bits_or_no_whole_number_is_refused(seed, error):
    """Seeds 2**32 apart gave the same clips (the offsets keep 32 bits); 1.5 and True
    were taken as 1, 'abc', None and NaN failed only when a batch was read."""
    with pytest.raises(error, match=r"^Clip seed must be a whole number in \[0, 4294967295\], "
                                    rf"not {re.escape(repr(seed))}$"):
        Clip(2, seed=seed)
    assert Clip(2, seed=2 ** 32 - 1).seed == 2 ** 32 - 1


def test_a_clip_that_is_no_clip_is_refused_naming_clip(kinds):
    says = r"^clip must be a readers.clips.Clip or None, not str '2'$"
    with pytest.raises(TypeError, match=says):
        WindowSource(kinds["latent"], "train", clip="2")
    with pytest.raises(TypeError, match=says):
        batches(kinds["latent"], "train", 2, clip="2")
    with pytest.raises(TypeError, match=says):
        readers.make_dataset(kinds["latent"], "train", batch_size=2, clip="2")


def test_a_structure_naming_clip_offset_without_a_clip_is_refused_when_made(kinds):
    with pytest.raises(ValueError, match=r"^structure names clip_offset, which only a clip "
                                         r"gives: pass clip=readers.clips.Clip\(...\)"):
        readers.make_dataset(kinds["latent"], "train", batch_size=2,
                             structure=(("window", "clip_offset"), "mask"))


@pytest.mark.slow
def test_every_other_frame_of_a_long_window(tmp_path):
    """600 frames, every other of 1,200 (a piece a frame would be more than one preadv
    takes: 1,024)."""
    write_videos(str(tmp_path / "in"), random_videos(np.random.default_rng(2), 2,
                                                     lengths=(1300, 1400), dim=2), files=1)
    run_job(str(tmp_path / "in" / "*"), tmp_path / "out", "--window", "1200", "--stride",
            "100", "--splits", "train=1.0")
    assert_verified(tmp_path / "out")
    clip = Clip(600, step=2)
    whole = WindowSource(str(tmp_path / "out"), "train").read_batch(slice(None))
    clipped = WindowSource(str(tmp_path / "out"), "train", clip=clip).read_batch(slice(None))
    _assert_clips_of(whole, clipped, clip, 1200)


@pytest.mark.parametrize("kind", ["latent", "raw", "png"])
def test_tf_data_clips_are_the_stored_windows_with_static_shapes(kinds, kind):
    path = kinds[kind]
    whole = WindowSource(path, "train").read_batch(slice(None))
    by_key = {(v, s): row for row, (v, s) in enumerate(zip(whole["video_id"], whole["start"]))}
    clip = Clip(2, step=2)
    ds = readers.make_dataset(path, "train", batch_size=2, clip=clip, seed=1)
    assert ds.element_spec["window"].shape[:2] == (2, 2)
    assert ds.element_spec["mask"].shape == (2, 2)
    offsets = []
    for batch in ds.as_numpy_iterator():
        rows = [by_key[(v, s)] for v, s in zip(batch["video_id"], batch["start"])]
        _assert_clips_of({name: values[rows] for name, values in whole.items()}, batch,
                         clip, 4)
        offsets += list(batch["clip_offset"])
    assert set(offsets) == {0, 1}
    again = [b["clip_offset"] for b in readers.make_dataset(
        path, "train", batch_size=2, clip=clip, seed=1).as_numpy_iterator()]
    np.testing.assert_array_equal(np.concatenate(again), offsets)
    for batch in readers.make_dataset(path, "train", batch_size=2, clip=Clip(4)
                                      ).as_numpy_iterator():      # the whole window
        rows = [by_key[(v, s)] for v, s in zip(batch["video_id"], batch["start"])]
        _assert_clips_of({name: values[rows] for name, values in whole.items()}, batch,
                         Clip(4), 4)


def test_tf_data_gives_clip_offset_in_a_structure(kinds):
    ds = readers.make_dataset(kinds["latent"], "train", batch_size=2, drop_remainder=True,
                              clip=Clip(3, offset="center"),
                              structure=(("window", "clip_offset"), "mask"))
    (window, offset), mask = next(iter(ds))
    assert window.shape == (2, 3, *window.shape[2:]) and mask.shape == (2, 3)
    assert list(offset.numpy()) == [0, 0]             # room 2: the center rounds down


@pytest.mark.parametrize("kind", ["latent", "float16", "bfloat16", "raw", "png", "jpeg"])
def test_every_encoding_gives_static_shapes_whole_or_clipped(kinds, kind):
    for clip in (None, Clip(3, step=1)):
        spec = readers.make_dataset(kinds[kind], "train", batch_size=2, clip=clip).element_spec
        assert all(s.shape.is_fully_defined() and s.shape[0] == 2 for s in spec.values()), spec
        assert spec["mask"].shape[1] == (4 if clip is None else 3)
