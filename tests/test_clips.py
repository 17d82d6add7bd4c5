"""Clips sampled at read time (readers.clips) in both readers: the stored window's frames,
mask and labels cut alike, offsets fixed or random per (seed, epoch, window), resumable."""
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
    for bad, says in [(dict(length=0), "length must be a whole number >= 1"),
                      (dict(length=2, step=1.5), "step must be a whole number"),
                      (dict(length=2, offset="middle"), "offset must be one of random")]:
        with pytest.raises(ValueError, match=says):
            Clip(**bad)
    with pytest.raises(ValueError, match=r"a clip of 3 frames every 2 spans 5 frames, more "
                                         r"than the dataset's windows hold \(4\)"):
        WindowSource(kinds["latent"], "train", clip=Clip(3, step=2))
    with pytest.raises(ValueError, match="epoch must be a whole number >= 0"):
        WindowSource(kinds["latent"], "train").for_epoch(-1)


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
