"""Selections (readers.Select): a split's windows chosen by video, valid frames and the
videos file's rows, resolved when a reader opens from the window tables beside the
shards (readers.format.window_table), in both readers; resumed exactly; requests that
are no selection refused in one line. The tables themselves, damaged, foreign, missing
or of an older format: test_window_tables.py."""
import functools
import json
import pickle
import re
import shutil

import fire_story as story
import numpy as np
import pytest
import tensorflow as tf
from format_datasets import kind_videos
from helpers import (
    docs_code,
    every_window,
    failures_by_video,
    run_job,
    videos_by_id,
    window_keys,
)
from input_files import latent_example, write_frame_folder, write_manifest

import readers
from beam_jobs.core.frames import BadRecord
from beam_jobs.sources.latents import LatentParser
from readers.clips import Clip
from readers.format import video_rows, window_table
from readers.numpy import EpochBatches, Select, WindowSource, batches, streaming

SELECTIONS = {   # name -> (Select, which windows of the whole split it keeps)
    "videos": (Select(videos=["exp1/run0", "exp2/run4"]),
               lambda b, rows: np.isin(b["video_id"], [b"exp1/run0", b"exp2/run4"])),
    "exclude": (Select(exclude_videos=["exp3/run2", "exp3/run5"]),
                lambda b, rows: ~np.isin(b["video_id"], [b"exp3/run2", b"exp3/run5"])),
    "valid": (Select(min_valid_frames=14),
              lambda b, rows: b["mask"].sum(1) >= 14),
    "row": (Select(where=lambda row: row["bad_frames"] >= 2),
            lambda b, rows: np.array([rows[v.decode()]["bad_frames"] >= 2
                                      for v in b["video_id"]])),
    "metadata": (Select(where=lambda row: row["metadata"][0] == 1.0),
                 lambda b, rows: b["metadata"][:, 0] == 1.0),
    "manifest field": (Select(where=lambda row: row["fields"]["fuel"] == "pine"),
                       lambda b, rows: np.array([story.fields(int(v.decode()[-1]))["fuel"] == "pine"
                                                 for v in b["video_id"]])),
    "fire story": (story.STORY,
                   lambda b, rows: (b["mask"].sum(1) >= 12) & (b["video_id"] != b"exp3/run2")
                   & ~np.char.startswith(b["video_id"], b"exp2/")),
}



@pytest.mark.parametrize("name", sorted(SELECTIONS))
def test_a_selection_is_a_filter_over_every_window_read_whole(fire, name):
    select, keeps = SELECTIONS[name]
    whole = every_window(fire)
    kept = keeps(whole, videos_by_id(fire))
    assert 0 < kept.sum() < len(kept), name      # a selection that chooses
    source = WindowSource(fire, "train", select=select)
    assert len(source) == kept.sum()
    selected = source.read_batch(slice(None))     # windows 0..n-1: the kept ones, in order
    for feature, column in whole.items():
        np.testing.assert_array_equal(selected[feature], column[kept], err_msg=feature)
    assert window_keys(source[[0, -1]]) == [window_keys(selected)[0], window_keys(selected)[-1]]
    assert source[len(source) - 1]["start"] == selected["start"][-1]
    with pytest.raises(IndexError):
        source[len(source)]
    # tf.data: the same set, whichever order, shuffled or not
    for shuffle in (True, False):
        ds = readers.make_dataset(fire, "train", 3, select=select, shuffle=shuffle, seed=2,
                                  drop_remainder=False)
        got = sorted(k for b in ds for k in window_keys({n: t.numpy() for n, t in b.items()}))
        assert got == sorted(window_keys(selected)), (name, shuffle)


def test_a_videos_file_row_holds_the_videos_metadata_and_its_manifests_own_fields(fire,
                                                                                 kinds):
    """What `where(row)` sees of a video beyond the job's facts: its metadata as its
    windows carry it (the latent story's recipe: the shortest decimals of the float32s),
    and every key of its manifest row that the job does not read, as given, under
    `fields`; a latent record has no manifest row (fields {})."""
    for video_id, row in videos_by_id(fire).items():
        v = int(video_id[-1])
        assert row["fields"] == story.fields(v), video_id
        assert row["metadata"] == [float(v % 2), float(v % 3 + 1)], video_id
    recipes = {video.video_id: video.metadata for video in kind_videos()["lat"]}
    rows = videos_by_id(kinds["latent"])
    assert rows.keys() == recipes.keys()
    for video_id, row in rows.items():
        assert row["metadata"] == [float(str(value)) for value in recipes[video_id]]
        assert np.array(row["metadata"], np.float32).tobytes() == recipes[video_id].tobytes()
        assert row["fields"] == {}
    whole = every_window(kinds["latent"])
    for video_id, metadata in zip(whole["video_id"], whole["metadata"], strict=True):
        np.testing.assert_array_equal(np.float32(rows[video_id.decode()]["metadata"]), metadata)


def test_a_row_past_what_the_videos_file_keeps_is_a_failure_naming_the_field(tmp_path):
    """The manifest's own fields are bounded (MAX_FIELDS bytes of JSON, strict: no NaN),
    and so is the metadata (MAX_METADATA values, in a manifest and in a latent record):
    a video past a bound is a failure row naming the field, the others are cut."""
    rows = []
    for v, (video_id, extra) in enumerate((
            ("a", {"fuel": "pine"}),
            ("notes", {"fuel": "oak", "notes": "x" * video_rows.MAX_FIELDS}),
            ("nan", {"heat": float("nan")}),
            ("recipe", {"metadata": [0.5] * (video_rows.MAX_METADATA + 1)}),
            ("b", {"fuel": "oak"}))):
        write_frame_folder(tmp_path / video_id, [np.full((6, 8, 3), v, np.uint8)] * 3)
        rows.append({"video_id": video_id, "frames": video_id, **extra})
    write_manifest(tmp_path / "m.jsonl", rows)
    run_job(str(tmp_path / "m.jsonl"), tmp_path / "out", "--window", "2",
            "--max_failure_fraction", "0.9")
    failed = {video: row["reason"] for video, row in failures_by_video(tmp_path / "out").items()}
    assert sorted(failed) == ["nan", "notes", "recipe"]
    assert re.fullmatch(r"the manifest row's own fields are 16,\d{3} bytes of JSON, more than "
                        r"the 16,384 its row of the videos file keeps \('notes' is 16,\d{3}\)",
                        failed["notes"]), failed["notes"]
    assert failed["nan"] == ("the manifest row's field 'heat' holds NaN or Infinity, which "
                             "JSON cannot write")
    assert failed["recipe"] == ("metadata has 1,025 values, more than the 1,024 its row of the "
                                "videos file keeps")
    assert {video: row["fields"] for video, row in videos_by_id(str(tmp_path / "out")).items()} == {
        "a": {"fuel": "pine"}, "b": {"fuel": "oak"}}
    record = latent_example(np.zeros((3, 2), np.float32), [0.5] * (video_rows.MAX_METADATA + 1))
    with pytest.raises(BadRecord, match="^metadata 'recipe' has 1,025 values, more than the "
                                        "1,024 its row of the videos file keeps$"):
        LatentParser().parse(record, "lat.tfrecord", 0)


def test_the_fire_story_in_the_docs_holds_one_experiment_out(fire):
    code = docs_code("readers.md", "Selecting windows")
    scope: dict = {}
    exec(code.replace('"out/"', repr(fire)).replace("64", "4"), scope)
    held = scope["validation"].read_batch(slice(None))
    train = [k for b in batches(fire, "train", 4, select=scope["train"]) for k in window_keys(b)]
    assert len(held["start"]) and len(train)
    assert all(v.startswith(b"exp3/") for v in held["video_id"])
    assert not any(v.startswith("exp3/") for v, _ in train)
    assert (held["mask"].sum(1) >= 12).all()
    assert sum(len(b) for b in scope["plan"]) == len(scope["validation"])
    assert next(iter(scope["ds"]))["mask"].numpy().sum(1).min() >= 12


def test_the_docs_select_by_a_manifest_field_and_by_metadata(fire):
    scope: dict = {}
    exec(docs_code("readers.md", "Selecting windows", 1).replace('"out/"', repr(fire))
         .replace("64", "4"), scope)
    whole = every_window(fire)
    assert window_keys(scope["source"].read_batch(slice(None))) == window_keys(
        {k: v[SELECTIONS["manifest field"][1](whole, None)] for k, v in whole.items()})
    odd = set(whole["video_id"][whole["metadata"][:, 0] == 1.0].tolist())
    assert {v for b in scope["ds"] for v in b["video_id"].numpy().tolist()} == odd


def test_min_valid_frames_counts_the_windows_frames_whatever_the_clip(fire):
    clip = Clip(2, offset="start")
    source = WindowSource(fire, "train", select=Select(min_valid_frames=story.WINDOW), clip=clip)
    whole = every_window(fire)
    assert len(source) == (whole["mask"].sum(1) == story.WINDOW).sum()
    assert source.read_batch(slice(None))["mask"].shape == (len(source), 2)


def test_an_epoch_is_every_selected_window_once_per_rank_in_both_orders(fire):
    select = SELECTIONS["fire story"][0]
    selected = sorted(window_keys(WindowSource(fire, "train", select=select).read_batch(
        slice(None))))
    for order in ("random", "stream"):
        ranks = [[k for b in batches(fire, "train", 2, select=select, order=order, seed=3,
                                     shard_index=r, num_shards=2, drop_remainder=False)
                  for k in window_keys(b)] for r in range(2)]
        assert len(ranks[0]) == len(ranks[1]) == len(selected) // 2
        assert not set(ranks[0]) & set(ranks[1])
        assert set(ranks[0]) | set(ranks[1]) <= set(selected)
        again = [k for b in batches(fire, "train", 2, select=select, order=order, seed=3,
                                    drop_remainder=False) for k in window_keys(b)]
        assert sorted(again) == selected


def test_the_streaming_order_reads_only_chunks_that_hold_a_selected_window(fire):
    source = WindowSource(fire, "train", select=Select(videos=["exp1/run3"]))
    selected = source.selected
    chunks = streaming.chunks_of(source.shards, chunk_bytes=8000, windows=selected)
    holding = [c for c in chunks
               if ((selected >= c.first) & (selected < c.first + c.count)).any()]
    order = streaming.stream_order(chunks, seed=1, epoch=0, buffer_bytes=3000,
                                   selected=selected)
    assert sorted(order.tolist()) == list(range(len(source)))
    chunk_of = np.searchsorted([c.first for c in chunks], selected[order], "right") - 1
    assert {chunks[c] for c in chunk_of} == set(holding)
    assert len(holding) < len(streaming.chunks_of(source.shards, chunk_bytes=8000))


@pytest.mark.parametrize("order", ["random", "stream"])
def test_a_selection_resumes_exactly_and_a_different_one_is_refused(kinds, order):
    path = kinds["latent"]
    whole = every_window(path)
    videos = sorted({v.decode() for v in whole["video_id"]})
    select = Select(videos=videos[:4], min_valid_frames=4)
    source = WindowSource(path, "train", select=select)
    full = [window_keys(b) for b in batches(path, "train", 3, seed=4, epoch=1, select=select,
                                      order=order)]
    assert len(full) >= 3
    for step in (1, len(full) - 1):
        resumed = batches(path, "train", 3, seed=4, epoch=1, select=select, order=order,
                          start_step=step)
        assert [window_keys(b) for b in resumed] == full[step:]
    plan = EpochBatches(source, 3, seed=4, epoch=1, order=order)
    state = json.loads(json.dumps(plan.state(2)))      # as saved beside a checkpoint
    assert state["selection"]["videos"] == repr(videos[:4])
    again = EpochBatches.resume(WindowSource(path, "train", select=select), state)
    assert [again.batch(k) for k in range(2, again.steps)] == [
        plan.batch(k) for k in range(2, plan.steps)]
    assert [window_keys(plan.source[again.batch(2)])] == [full[2]]

    def video_in(ids):    # two predicates of one qualified name, another result
        def where(row):
            return row["video_id"] in ids
        return where

    for other in (None, Select(videos=videos[:4], min_valid_frames=3),
                  Select(where=video_in(videos[:4]), min_valid_frames=4)):
        with pytest.raises(ValueError, match=r"they differ in .*selection \(") as refused:
            EpochBatches.resume(WindowSource(path, "train", select=other), state)
        assert "\n" not in str(refused.value)
    by_name = EpochBatches(WindowSource(path, "train", select=Select(
        where=video_in(videos[:4]))), 3, order=order).state(1)
    with pytest.raises(ValueError, match=r"selection \(.*'where': 'test_select.*sha256"):
        EpochBatches.resume(WindowSource(path, "train", select=Select(
            where=video_in(videos[1:5]))), by_name)
    # a state saved before selections existed has no selection: every window
    old = EpochBatches(WindowSource(path, "train"), 3).state(1)
    del old["selection"]
    assert EpochBatches.resume(WindowSource(path, "train"), old).start_step == 1


def test_a_source_with_a_lambda_selection_pickles_for_workers_and_names_it(kinds):
    source = WindowSource(kinds["latent"], "train",
                          select=Select(where=lambda row: row["frames"] > 20))
    copy = pickle.loads(pickle.dumps(source))       # the predicate is not pickled
    assert len(copy) == len(source) and repr(copy) == repr(source)
    assert window_keys(copy[[0, 1]]) == window_keys(source[[0, 1]])
    assert "select=Select(where=test_select." in repr(source) and "sha256" in repr(source)
    assert "select=" not in repr(WindowSource(kinds["latent"], "train"))   # as before
    assert len(WindowSource(kinds["latent"], "train", select=Select())) == len(
        WindowSource(kinds["latent"], "train"))       # an empty Select keeps everything


def test_a_tf_checkpoint_of_a_selection_resumes_and_names_it(kinds, tmp_path):
    path = kinds["latent"]
    select = Select(min_valid_frames=4)

    def keys(iterator, n):
        return [window_keys({k: v.numpy() for k, v in next(iterator).items()}) for _ in range(n)]

    straight = keys(iter(readers.make_dataset(path, batch_size=3, seed=5, repeat=True,
                                              select=select)), 8)
    iterator = iter(readers.make_dataset(path, batch_size=3, seed=5, repeat=True,
                                         select=select))
    assert keys(iterator, 3) == straight[:3]
    saved = tf.train.Checkpoint(iterator=iterator).save(str(tmp_path / "ckpt"))
    resumed = iter(readers.make_dataset(path, batch_size=3, seed=5, repeat=True,
                                        select=select))
    tf.train.Checkpoint(iterator=resumed).restore(saved).assert_consumed()
    assert keys(resumed, 5) == straight[3:]
    for other in (None, Select(min_valid_frames=3)):
        elsewhere = iter(readers.make_dataset(path, batch_size=3, seed=5, repeat=True,
                                              select=other))
        with pytest.raises(ValueError, match=r"they differ in selection \(\[Select\("
                                             r"min_valid_frames=4\): "):
            tf.train.Checkpoint(iterator=elsewhere).restore(saved)


def test_tf_data_never_opens_a_shard_the_selection_leaves_out(fire, tmp_path):
    copy = shutil.copytree(fire, tmp_path / "copy")
    shards = readers.load_spec(str(copy)).splits["train"].shards
    held = [set(window_table.decode((copy / s.table).read_bytes(), s, story.WINDOW).videos.tolist())
            for s in shards]
    in_shards = {v: [k for k, hashes in enumerate(held)
                     if window_table.video_hash(v) in hashes] for v in videos_by_id(fire)}
    video = min(in_shards, key=lambda v: len(in_shards[v]))    # one of 2 windows or so
    assert len(in_shards[video]) < len(shards)
    for k, shard in enumerate(shards):
        if k not in in_shards[video]:     # zeros: a record read from it would fail
            (copy / shard.file).write_bytes(bytes(shard.bytes))
    for shuffle in (True, False):
        ds = readers.make_dataset(str(copy), "train", 1, select=Select(videos=[video]),
                                  shuffle=shuffle)
        assert {v for b in ds for v in b["video_id"].numpy().tolist()} == {video.encode()}


def test_tf_data_selects_from_gzip_shards_too(kinds):
    """Gzip shards have window tables too (readers.numpy reads no gzip shard)."""
    def keys(ds, videos=None):
        return sorted((v, int(s)) for b in ds
                      for v, s in zip(b["video_id"].numpy(), b["start"].numpy(), strict=True)
                      if videos is None or v in videos)
    whole = readers.make_dataset(kinds["gzip"], "train", 3, shuffle=False,
                                 drop_remainder=False)
    videos = sorted({v for b in whole for v in b["video_id"].numpy()})[::2]
    selected = keys(readers.make_dataset(kinds["gzip"], "train", 3, drop_remainder=False,
                                         select=Select(videos=[v.decode() for v in videos])))
    assert selected == keys(whole, videos) and selected


def test_requests_that_cannot_be_selections_are_refused_in_one_line(fire):
    for select, error, needle in (
            ("exp1", TypeError, "select must be a readers.Select or None, not str"),
            (Select(min_valid_frames=story.WINDOW + 1), ValueError,
             f"have {story.WINDOW} frames; none has more"),
            (Select(videos=["exp1/run0", "exp9/typo"]), ValueError,
             r"1 of its ids are no video of .*, e.g. 'exp9/typo'"),
            (Select(where=lambda row: row.get("fuel")), TypeError,
             r"where test_select.* returned None for video 'exp1/run0', not True or False")):
        with pytest.raises(error, match=needle):
            WindowSource(fire, "train", select=select)
    for wrong, error, needle in (
            ({"videos": "exp1/run0"}, TypeError, r"not the single str 'exp1/run0': pass \["),
            ({"exclude_videos": [3]}, TypeError, "must hold video ids .strings., not int 3"),
            ({"videos": [None]}, TypeError, "^videos must hold video ids .strings., not None"),
            ({"videos": [None, "a"]}, TypeError, "^videos must hold video ids .strings., not "
                                                 "None"),
            ({"min_valid_frames": -1}, ValueError, "min_valid_frames must be a whole number"),
            ({"where": "row['fuel']"}, TypeError, "where must be a function or None")):
        with pytest.raises(error, match=needle):
            Select(**wrong)
    for nothing in (Select(videos=[]), Select(where=lambda row: False)):   # both readers
        for read in (WindowSource, functools.partial(readers.make_dataset, batch_size=1)):
            with pytest.raises(ValueError, match=rf"^Select\(.*\): 0 windows, sha256 \w+ "
                                                 rf"keeps no window of split 'train' of "
                                                 rf"{fire}$"):
                read(fire, "train", select=nothing)
