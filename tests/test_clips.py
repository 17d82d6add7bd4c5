"""Clips sampled at read time (readers.clips) in the tf.data reader, and refused alike in
both readers (readers.numpy's clips: tests/readers_only/test_numpy_clips.py)."""
import numpy as np
import pytest
from helpers import assert_clips_of, assert_verified, run_job
from input_files import random_videos, write_videos

import readers
from readers.clips import Clip
from readers.numpy import WindowSource, batches


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
    assert_clips_of(whole, clipped, clip, 1200)


@pytest.mark.parametrize("kind", ["latent", "raw", "png"])
def test_tf_data_clips_are_the_stored_windows_with_static_shapes(kinds, kind):
    path = kinds[kind]
    whole = WindowSource(path, "train").read_batch(slice(None))
    by_key = {(v, s): row
              for row, (v, s) in enumerate(zip(whole["video_id"], whole["start"], strict=True))}
    clip = Clip(2, step=2)
    ds = readers.make_dataset(path, "train", batch_size=2, clip=clip, seed=1)
    assert ds.element_spec["window"].shape[:2] == (2, 2)
    assert ds.element_spec["mask"].shape == (2, 2)
    offsets = []
    for batch in ds.as_numpy_iterator():
        rows = [by_key[(v, s)] for v, s in zip(batch["video_id"], batch["start"], strict=True)]
        assert_clips_of({name: values[rows] for name, values in whole.items()}, batch,
                         clip, 4)
        offsets += list(batch["clip_offset"])
    assert set(offsets) == {0, 1}
    again = [b["clip_offset"] for b in readers.make_dataset(
        path, "train", batch_size=2, clip=clip, seed=1).as_numpy_iterator()]
    np.testing.assert_array_equal(np.concatenate(again), offsets)
    for batch in readers.make_dataset(path, "train", batch_size=2, clip=Clip(4)
                                      ).as_numpy_iterator():      # the whole window
        rows = [by_key[(v, s)] for v, s in zip(batch["video_id"], batch["start"], strict=True)]
        assert_clips_of({name: values[rows] for name, values in whole.items()}, batch,
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
