"""Clips sampled at read time (readers.clips) in readers.numpy: the stored window's
frames, mask and labels cut alike, offsets fixed or random per (seed, epoch, window),
resumable (the tf.data reader's clips: tests/test_clips.py)."""
import re

import numpy as np
import pytest
from helpers import assert_clips_of
from PIL import Image

import readers
import readers.numpy
from readers.clips import Clip
from readers.numpy import EpochBatches, WindowSource, batches

CLIPS = [Clip(2, step=2), Clip(3), Clip(2, step=3, offset="center"), Clip(1, offset="start"),
         Clip(4, offset="center")]


@pytest.mark.parametrize("kind", ["latent", "float16", "long", "raw", "png", "jpeg"])
def test_a_clip_is_its_stored_windows_frames_mask_and_labels(datasets, kind):
    whole_source = WindowSource(datasets[kind], "train")
    window = whole_source.spec.window.length
    whole = whole_source.read_batch(slice(None))
    for clip in CLIPS:
        for epoch in (0, 3):
            source = WindowSource(datasets[kind], "train", clip=clip, epoch=epoch)
            assert_clips_of(whole, source.read_batch(slice(None)), clip, window)
    if kind == "raw":
        assert "labels" in whole      # the manifest's videos have per-frame labels


def test_fixed_offsets_are_the_start_and_the_center(datasets):
    source = WindowSource(datasets["latent"], "train", clip=Clip(2, offset="center"))
    assert set(source.read_batch(slice(None))["clip_offset"]) == {1}      # room 3
    source = WindowSource(datasets["latent"], "train", clip=Clip(2, step=2, offset="start"))
    assert set(source.read_batch(slice(None))["clip_offset"]) == {0}


def test_random_offsets_are_a_pure_function_of_seed_epoch_and_window(datasets):
    path = datasets["long"]
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


def test_batches_with_clips_resume_at_a_step_and_match_a_sampler(datasets):
    path, clip = datasets["png"], Clip(2, step=2)
    straight = list(batches(path, "train", 2, seed=4, epoch=2, clip=clip))
    resumed = list(batches(path, "train", 2, seed=4, epoch=2, clip=clip, start_step=1))
    assert len(straight) > 1
    for ours, theirs in zip(straight[1:], resumed, strict=True):
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
    for ours, step in zip(straight[1:], again, strict=True):
        read = again.source.read_batch(step)
        for name in ("window", "clip_offset"):
            np.testing.assert_array_equal(read[name], ours[name])


def test_encoded_frames_a_clip_skips_are_never_decoded(datasets, monkeypatch):
    source = WindowSource(datasets["png"], "train", clip=Clip(1, offset="start"))
    opened = []
    real_open = Image.open
    monkeypatch.setattr(Image, "open", lambda *a, **k: opened.append(1) or real_open(*a, **k))
    source.read_batch(slice(None))
    assert len(opened) == len(source)                 # one frame a window, of 4 stored


def test_clips_that_cannot_be_cut_are_refused_in_one_line(datasets):
    for bad, error, says in [(dict(length=0), ValueError, "length must be a whole number >= 1"),
                             (dict(length=2, step=1.5), TypeError, "step must be a whole number"),
                             (dict(length=2, offset="middle"), ValueError,
                              "offset must be one of random")]:
        with pytest.raises(error, match=says):
            Clip(**bad)
    with pytest.raises(ValueError, match=r"a clip of 3 frames every 2 spans 5 frames, more "
                                         r"than the dataset's windows hold \(4\)"):
        WindowSource(datasets["latent"], "train", clip=Clip(3, step=2))
    with pytest.raises(ValueError, match="epoch must be a whole number >= 0"):
        WindowSource(datasets["latent"], "train").for_epoch(-1)


@pytest.mark.parametrize("seed, error", [(2 ** 63, ValueError), (2 ** 64, ValueError),
                                         (-1, ValueError), ("abc", TypeError),
                                         (None, TypeError), (float("nan"), TypeError),
                                         (1.5, TypeError), (True, TypeError)])
def test_a_clip_seed_outside_every_readers_range_or_no_whole_number_is_refused(seed, error):
    """1.5 and True were taken as 1, 'abc', None and NaN failed only when a batch was
    read; a seed is in [0, 2**63), as the readers' (tests/test_reader.py)."""
    with pytest.raises(error, match=r"^Clip seed must be a whole number in "
                                    rf"\[0, 9223372036854775807\], not {re.escape(repr(seed))}$"):
        Clip(2, seed=seed)
    assert Clip(2, seed=2 ** 63 - 1).seed == 2 ** 63 - 1


def test_seeds_2_to_the_32_apart_give_other_clips_and_those_below_the_same_as_before():
    """A clip's offsets kept 32 bits of the seed, so seeds past 2**32 were refused; its
    high word now goes into the hash, and adds nothing below 2**32 (clips saved with
    such a seed, in a resume state, are the same)."""
    windows = np.arange(1000)
    low, high = (Clip(2, seed=s).offsets(10, windows, epoch=3) for s in (7, 7 + 2 ** 32))
    assert (low != high).mean() > 0.5
    np.testing.assert_array_equal(low[:8], [2, 4, 0, 4, 0, 1, 3, 5])    # as before


def test_a_clip_is_imported_from_readers_and_readers_numpy_as_a_selection_is():
    assert readers.Clip is readers.numpy.Clip is Clip and "Clip" in readers.__all__
    assert readers.Select is readers.numpy.Select and "Select" in readers.__all__
