"""Exact resume: tf.data from its checkpoint; and a resume refused where it would not
mean the same windows (another dataset, an append since, another split, features or
clip). readers.numpy's resume at a step and from a saved state, and its states and
steps checked: tests/readers_only/test_numpy_resume.py."""
import json
import re

import numpy as np
import pytest
import tensorflow as tf
from format_datasets import kind_videos, write_dataset
from helpers import run_job
from input_files import (
    random_videos,
    solid_frames,
    write_frame_folder,
    write_manifest,
    write_videos,
)

import readers
from readers.clips import Clip
from readers.numpy import EpochBatches, Select, WindowSource


@pytest.fixture(scope="module")
def eight_shards(tmp_path_factory) -> str:
    """kind_videos' 10 latent videos (113 windows of 4 every 2) in 8 shards, written by
    format_datasets (the job's bytes, without a job run)."""
    return write_dataset(tmp_path_factory.mktemp("eight") / "out", kind_videos()["lat"],
                         "--window", "4", "--stride", "2", "--num_shards", "8")


def _tf_keys(iterator, steps: int) -> list:
    """(video_id, start, clip_offset) of each window of the next `steps` batches."""
    return [list(zip(b["video_id"].numpy().tolist(), b["start"].numpy().tolist(),
                     b["clip_offset"].numpy().tolist(), strict=True))
            for b in (next(iterator) for _ in range(steps))]


@pytest.mark.slow
@pytest.mark.parametrize("select", [None, Select(exclude_videos=["lat-0.tfrecord:1",
                                                                 "lat-1.tfrecord:3"])],
                         ids=["whole", "select"])
def test_the_tf_reader_resumes_exactly_from_a_checkpoint(eight_shards, tmp_path, select):
    """Over six passes of 8 shards, with a clip: restored in the first pass, mid-pass in
    later ones and at a pass boundary, the batches are those of the run never stopped.
    Each pass reshuffles the shards: restored iterators drew other shard orders from
    the second pass on (TensorFlow's parallel interleave drops its spent input, the
    shard shuffle whose seed generator chose each pass's order)."""
    def reader():
        return iter(readers.make_dataset(eight_shards, batch_size=4, seed=5, repeat=True,
                                         clip=Clip(2, seed=3), select=select))

    windows = len(WindowSource(eight_shards, select=select))
    steps = -(-6 * windows // 4)           # six passes
    straight = _tf_keys(reader(), steps)
    flat = [key for batch in straight for key in batch]
    passes = [sorted(key[:2] for key in flat[p * windows:(p + 1) * windows]) for p in range(6)]
    assert all(keys == passes[0] for keys in passes) and len(set(passes[0])) == windows
    # in the first pass, mid second, at the end of the second, mid fifth, in the sixth
    for stop in (1, 3 * windows // 8, windows // 2, 9 * windows // 8, steps - 2):
        iterator = reader()
        assert _tf_keys(iterator, stop) == straight[:stop]
        saved = tf.train.Checkpoint(iterator=iterator).save(str(tmp_path / f"c{stop}" / "c"))
        resumed = reader()
        tf.train.Checkpoint(iterator=resumed).restore(saved).assert_consumed()
        assert _tf_keys(resumed, steps - stop) == straight[stop:], stop


def test_a_tf_checkpoint_restored_on_another_dataset_is_refused(kinds, tmp_path):
    """tf.data saves the pipeline's graph with its state: restored on another dataset's
    iterator, it went on reading the shards it was saved from."""
    iterator = iter(readers.make_dataset(kinds["latent"], batch_size=2, seed=1, repeat=True))
    next(iterator)
    saved = tf.train.Checkpoint(iterator=iterator).save(str(tmp_path / "ckpt"))
    for other, split in ((kinds["float16"], "train"), (kinds["latent"], "test")):
        elsewhere = iter(readers.make_dataset(other, split, batch_size=2, seed=1, repeat=True))
        with pytest.raises(ValueError) as refused:
            tf.train.Checkpoint(iterator=elsewhere).restore(saved)
        message = str(refused.value)
        assert f"this tf.data checkpoint reads {kinds['latent']} (run " in message
        assert f"restored on a reader of {other} (run " in message and "\n" not in message
    # the same dataset read otherwise: TensorFlow failed in its words ("Expected 1
    # components but got 5", "Failed to restore dataset iterator"), or read on in the
    # saved order
    for options, differs, now in (
            ({"clip": Clip(2)}, "clip", "[clip Clip(length=2, step=1, offset='random', seed=0)]"),
            ({"features": ["window"]}, "features", "[features ['window']] now"),
            ({"batch_size": 3}, "order", "[batches of 3, shuffled with seed 1, repeated] now"),
            ({"seed": 2}, "order", "[batches of 2, shuffled with seed 2, repeated] now")):
        given = {"batch_size": 2, "seed": 1, "repeat": True, **options}
        otherwise = iter(readers.make_dataset(kinds["latent"], **given))
        with pytest.raises(ValueError, match=rf"they differ in {differs} \(\[") as refused:
            tf.train.Checkpoint(iterator=otherwise).restore(saved)
        assert now in str(refused.value) and "\n" not in str(refused.value)


def test_a_tf_checkpoint_of_an_older_pipeline_is_refused_in_one_line(kinds, tmp_path,
                                                                     monkeypatch):
    """A pipeline's graph is saved with its state: a checkpoint of the pipeline before
    each pass's order came from seed words failed in TensorFlow's words ("the dataset
    definition has changed"). One saved by another PIPELINE is refused, naming it."""
    from readers.tfdata import checkpoints
    with monkeypatch.context() as older:
        older.setattr(checkpoints, "PIPELINE", "readers' tf.data pipeline 1")
        iterator = iter(readers.make_dataset(kinds["latent"], batch_size=2, seed=1,
                                             repeat=True))
        next(iterator)
        saved = tf.train.Checkpoint(iterator=iterator).save(str(tmp_path / "ckpt"))
    now = iter(readers.make_dataset(kinds["latent"], batch_size=2, seed=1, repeat=True))
    with pytest.raises(ValueError, match=r"they differ in pipeline \(\[readers' tf.data "
                                         r"pipeline 1\] saved, \[readers' tf.data pipeline 2"
                                         r"\] now\): restore it on a reader of what it read, "
                                         r"or start this one afresh$"):
        tf.train.Checkpoint(iterator=now).restore(saved)


def test_a_state_saved_before_an_append_is_refused(tmp_path, rng):
    """An append changes the permutation (it is over every window): step k of the old
    epoch does not name the same windows in the grown one."""

    write_videos(str(tmp_path / "day1"), random_videos(rng, 6), files=1)
    run_job(str(tmp_path / "day1" / "*"), tmp_path / "out", "--window", "4")
    state = EpochBatches(WindowSource(str(tmp_path / "out")), 2, seed=1).state(3)
    write_videos(str(tmp_path / "day2"), random_videos(rng, 3), files=1)
    run_job(str(tmp_path / "day*" / "*"), tmp_path / "out", "--window", "4", "--append")
    grown = WindowSource(str(tmp_path / "out"))
    with pytest.raises(ValueError, match=r"they differ in run_id \('\w+' saved, '\w+' now\), "
                                         r"windows \(\d+ saved, \d+ now\): an --append or a "
                                         r"rebuild since; the same step would not give the "
                                         r"same batch"):
        EpochBatches.resume(grown, state)


def test_a_state_names_its_reading_and_resumes_on_no_other_split_features_or_clip(tmp_path):
    """Splits a and b hold a video of 6 frames each: 2 windows each. A state saved on a
    resumed on b, which has as many windows (it named neither split nor path)."""
    rows = []
    for split, start in (("a", 0), ("b", 10)):
        write_frame_folder(tmp_path / split, solid_frames(6, start=start))
        rows.append({"video_id": split, "frames": split, "split": split})
    write_manifest(tmp_path / "m.jsonl", rows)
    out = str(tmp_path / "out")
    run_job(str(tmp_path / "m.jsonl"), out, "--window", "4", "--stride", "2",
            "--splits", "a=0.5,b=0.5", "--frame_encoding", "raw")
    plan = EpochBatches(WindowSource(out, "a", clip=Clip(2, seed=5)), 1, seed=np.int64(3))
    state = json.loads(json.dumps(plan.state(1)))
    assert {key: state[key] for key in ("dataset", "split", "windows", "features", "clip")} == {
        "dataset": out, "split": "a", "windows": 2,
        "features": ["window", "mask", "video_id", "start"],
        "clip": {"length": 2, "step": 1, "offset": "random", "seed": 5}}
    assert state["run_id"] == readers.load_spec(out).run_id and state["seed"] == 3
    resumed = EpochBatches.resume(WindowSource(out, "a", clip=Clip(2, seed=5)), state)
    assert list(resumed) == [plan.batch(1)]
    for source, differ in (
            (WindowSource(out, "b", clip=Clip(2, seed=5)), r"split \('a' saved, 'b' now\)"),
            (WindowSource(out, "a", ["window"], clip=Clip(2, seed=5)),
             r"features \(\['window', 'mask', 'video_id', 'start'\] saved, \['window'\] now\)"),
            (WindowSource(out, "a"), r"clip \(\{'length': 2, .*'seed': 5\} saved, None now\)")):
        with pytest.raises(ValueError, match=rf"^this state, saved on {re.escape(out)} split "
                                             rf"'a', cannot resume on {re.escape(out)} split "
                                             rf"'{source.split}': they differ in "
                                             rf"{differ}; the same step would not give the "
                                             r"same batch: resume it on what it was saved on"):
            EpochBatches.resume(source, state)
