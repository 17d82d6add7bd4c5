"""Selections (readers.Select): a split's windows chosen by video, valid frames and the
videos file's rows, resolved when a reader opens from the window tables beside the
shards (readers.format.window_table), in both readers; resumed exactly; refused in one
line where a dataset has no tables; the tables checked by --verify."""
import concurrent.futures
import dataclasses
import functools
import json
import os
import pickle
import re
import shutil
import struct

import gcs_emulator
import google_crc32c
import numpy as np
import pytest
import tensorflow as tf
from format_datasets import kind_videos
from helpers import (
    assert_verified,
    docs_code,
    failures_by_video,
    latent_example,
    run_job,
    write_frame_folder,
    write_manifest,
)

import readers
from beam_jobs.core.frames import BadRecord
from beam_jobs.sources.latents import LatentParser
from readers.clips import Clip
from readers.format import FORMAT_VERSION, Shard, index, video_rows, window_table
from readers.format.names import without_run_id
from readers.numpy import EpochBatches, Select, WindowSource, batches, streaming

WINDOW = 16


def _fields(v: int) -> dict:
    """The manifest's own fields of the fire story's video `v`: what the job does not read."""
    return {"fuel": ("pine", "oak")[v // 4], "site": ("Köln", "Montréal")[v % 2],
            "wind": {"speed": v * 0.5, "gusts": [v, 2 * v]}, "notes": None}


@pytest.fixture(scope="module")
def fire(tmp_path_factory) -> str:
    """The fire story in small: 8 videos of 3 experiments (`exp1/...`), frames 6x8 with
    some missing (masked: --on_bad_frame mask), per-frame labels, metadata [v % 2, exp],
    fields of its own (`_fields`); windows of 16 every 4, the tail padded, 6 shards."""
    root = tmp_path_factory.mktemp("fire")
    rng = np.random.default_rng(49)
    rows = []
    for v in range(8):
        video_id, length = f"exp{v % 3 + 1}/run{v}", 14 + 3 * v
        folder = root / video_id.replace("/", "_")
        paths = write_frame_folder(folder, list(rng.integers(0, 256, (length, 6, 8, 3),
                                                             np.uint8)))
        for gone in rng.choice(length, v % 4 * 2, replace=False):   # 0 to 6 missing
            os.remove(paths[gone])
        rows.append({"video_id": video_id, "frames": paths,
                     "labels": [float(100 + t) for t in range(length)],
                     "metadata": [float(v % 2), float(v % 3 + 1)], **_fields(v)})
    write_manifest(root / "m.jsonl", rows)
    run_job(str(root / "m.jsonl"), root / "out", "--window", str(WINDOW), "--stride", "4",
            "--tail", "pad", "--frame_encoding", "raw", "--on_bad_frame", "mask",
            "--splits", "train=1.0", "--num_shards", "6")
    return str(root / "out")


def _keys(batch) -> list:
    return [(v.decode(), int(s)) for v, s in zip(batch["video_id"], batch["start"], strict=True)]


def _whole(path: str, split: str = "train") -> dict:
    return WindowSource(path, split).read_batch(slice(None))


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
                       lambda b, rows: np.array([_fields(int(v.decode()[-1]))["fuel"] == "pine"
                                                 for v in b["video_id"]])),
    "fire story": (Select(min_valid_frames=12, exclude_videos=["exp3/run2"],
                          where=lambda row: not row["video_id"].startswith("exp2/")),
                   lambda b, rows: (b["mask"].sum(1) >= 12) & (b["video_id"] != b"exp3/run2")
                   & ~np.char.startswith(b["video_id"], b"exp2/")),
}


def _rows(path: str) -> dict:
    spec = readers.load_spec(path)
    with open(os.path.join(path, spec.sidecars["videos"])) as f:
        return {row["video_id"]: row for row in map(json.loads, f)}


@pytest.mark.parametrize("name", sorted(SELECTIONS))
def test_a_selection_is_a_filter_over_every_window_read_whole(fire, name):
    select, keeps = SELECTIONS[name]
    whole = _whole(fire)
    kept = keeps(whole, _rows(fire))
    assert 0 < kept.sum() < len(kept), name      # a selection that chooses
    source = WindowSource(fire, "train", select=select)
    assert len(source) == kept.sum()
    selected = source.read_batch(slice(None))     # windows 0..n-1: the kept ones, in order
    for feature, column in whole.items():
        np.testing.assert_array_equal(selected[feature], column[kept], err_msg=feature)
    assert _keys(source[[0, -1]]) == [_keys(selected)[0], _keys(selected)[-1]]
    assert source[len(source) - 1]["start"] == selected["start"][-1]
    with pytest.raises(IndexError):
        source[len(source)]
    # tf.data: the same set, whichever order, shuffled or not
    for shuffle in (True, False):
        ds = readers.make_dataset(fire, "train", 3, select=select, shuffle=shuffle, seed=2,
                                  drop_remainder=False)
        got = sorted(k for b in ds for k in _keys({n: t.numpy() for n, t in b.items()}))
        assert got == sorted(_keys(selected)), (name, shuffle)


def test_a_videos_file_row_holds_the_videos_metadata_and_its_manifests_own_fields(fire,
                                                                                 kinds):
    """What `where(row)` sees of a video beyond the job's facts: its metadata as its
    windows carry it (the latent story's recipe: the shortest decimals of the float32s),
    and every key of its manifest row that the job does not read, as given, under
    `fields`; a latent record has no manifest row (fields {})."""
    for video_id, row in _rows(fire).items():
        v = int(video_id[-1])
        assert row["fields"] == _fields(v), video_id
        assert row["metadata"] == [float(v % 2), float(v % 3 + 1)], video_id
    recipes = {video.video_id: video.metadata for video in kind_videos()["lat"]}
    rows = _rows(kinds["latent"])
    assert rows.keys() == recipes.keys()
    for video_id, row in rows.items():
        assert row["metadata"] == [float(str(value)) for value in recipes[video_id]]
        assert np.array(row["metadata"], np.float32).tobytes() == recipes[video_id].tobytes()
        assert row["fields"] == {}
    whole = _whole(kinds["latent"])
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
    assert {video: row["fields"] for video, row in _rows(str(tmp_path / "out")).items()} == {
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
    train = [k for b in batches(fire, "train", 4, select=scope["train"]) for k in _keys(b)]
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
    whole = _whole(fire)
    assert _keys(scope["source"].read_batch(slice(None))) == _keys(
        {k: v[SELECTIONS["manifest field"][1](whole, None)] for k, v in whole.items()})
    odd = set(whole["video_id"][whole["metadata"][:, 0] == 1.0].tolist())
    assert {v for b in scope["ds"] for v in b["video_id"].numpy().tolist()} == odd


def test_min_valid_frames_counts_the_windows_frames_whatever_the_clip(fire):
    clip = Clip(2, offset="start")
    source = WindowSource(fire, "train", select=Select(min_valid_frames=WINDOW), clip=clip)
    whole = _whole(fire)
    assert len(source) == (whole["mask"].sum(1) == WINDOW).sum()
    assert source.read_batch(slice(None))["mask"].shape == (len(source), 2)


def test_an_epoch_is_every_selected_window_once_per_rank_in_both_orders(fire):
    select = SELECTIONS["fire story"][0]
    selected = sorted(_keys(WindowSource(fire, "train", select=select).read_batch(slice(None))))
    for order in ("random", "stream"):
        ranks = [[k for b in batches(fire, "train", 2, select=select, order=order, seed=3,
                                     shard_index=r, num_shards=2, drop_remainder=False)
                  for k in _keys(b)] for r in range(2)]
        assert len(ranks[0]) == len(ranks[1]) == len(selected) // 2
        assert not set(ranks[0]) & set(ranks[1])
        assert set(ranks[0]) | set(ranks[1]) <= set(selected)
        again = [k for b in batches(fire, "train", 2, select=select, order=order, seed=3,
                                    drop_remainder=False) for k in _keys(b)]
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
    whole = _whole(path)
    videos = sorted({v.decode() for v in whole["video_id"]})
    select = Select(videos=videos[:4], min_valid_frames=4)
    source = WindowSource(path, "train", select=select)
    full = [_keys(b) for b in batches(path, "train", 3, seed=4, epoch=1, select=select,
                                      order=order)]
    assert len(full) >= 3
    for step in (1, len(full) - 1):
        resumed = batches(path, "train", 3, seed=4, epoch=1, select=select, order=order,
                          start_step=step)
        assert [_keys(b) for b in resumed] == full[step:]
    plan = EpochBatches(source, 3, seed=4, epoch=1, order=order)
    state = json.loads(json.dumps(plan.state(2)))      # as saved beside a checkpoint
    assert state["selection"]["videos"] == repr(videos[:4])
    again = EpochBatches.resume(WindowSource(path, "train", select=select), state)
    assert [again.batch(k) for k in range(2, again.steps)] == [
        plan.batch(k) for k in range(2, plan.steps)]
    assert [_keys(plan.source[again.batch(2)])] == [full[2]]

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
    assert _keys(copy[[0, 1]]) == _keys(source[[0, 1]])
    assert "select=Select(where=test_select." in repr(source) and "sha256" in repr(source)
    assert "select=" not in repr(WindowSource(kinds["latent"], "train"))   # as before
    assert len(WindowSource(kinds["latent"], "train", select=Select())) == len(
        WindowSource(kinds["latent"], "train"))       # an empty Select keeps everything


def test_a_tf_checkpoint_of_a_selection_resumes_and_names_it(kinds, tmp_path):
    path = kinds["latent"]
    select = Select(min_valid_frames=4)

    def keys(iterator, n):
        return [_keys({k: v.numpy() for k, v in next(iterator).items()}) for _ in range(n)]

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
    held = [set(window_table.decode((copy / s.table).read_bytes(), s, WINDOW).videos.tolist())
            for s in shards]
    in_shards = {v: [k for k, hashes in enumerate(held)
                     if window_table.video_hash(v) in hashes] for v in _rows(fire)}
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


def _as_format_5(path, tmp_path, name: str = "old") -> str:
    """A copy of a dataset as format 5 wrote it: no window tables."""
    copy = shutil.copytree(path, tmp_path / name)
    meta = json.loads((copy / "dataset.json").read_text())
    meta["format_version"] = 5
    for generation in meta["generations"]:
        del generation["format_version"]
    for split in meta["splits"].values():
        for shard in split["shards"]:
            del shard["table_crc32c"]
            os.remove(copy / shard.pop("table"))
    meta["files"] = [f for f in meta["files"] if not f.endswith(".table")]
    (copy / "dataset.json").write_text(json.dumps(meta))
    return str(copy)


def test_a_dataset_without_tables_reads_whole_and_refuses_a_selection_in_one_line(
        kinds, tmp_path):
    old = _as_format_5(kinds["latent"], tmp_path)
    assert len(WindowSource(old, "train")) == len(WindowSource(kinds["latent"], "train"))
    assert next(iter(readers.make_dataset(old, "train", 2)))["window"].shape[0] == 2
    assert_verified(old)
    for read in (lambda: WindowSource(old, "train", select=Select(min_valid_frames=1)),
                 lambda: readers.make_dataset(old, "train", 2, select=Select(videos=[]))):
        with pytest.raises(ValueError) as refused:
            read()
        message = str(refused.value)
        assert message == (
            f"{old} is a dataset of format 5, which has no window tables, so select= cannot "
            "choose its windows by video, valid frames or metadata (it reads whole without "
            f"select=): rebuild it with --overwrite by this job (format {FORMAT_VERSION} writes "
            "them) to select")


@pytest.mark.slow
def test_an_append_onto_a_dataset_without_tables_refuses_selection_for_the_whole_split(
        tmp_path):
    from helpers import random_videos, write_videos

    rng = np.random.default_rng(8)
    flags = ["--window", "4", "--stride", "2", "--append"]
    write_videos(str(tmp_path / "R" / "day1"), random_videos(rng, 4, lengths=(12, 20)), files=1)
    run_job(str(tmp_path / "R" / "*" / "*"), tmp_path / "built", *flags)
    old = _as_format_5(tmp_path / "built", tmp_path, "out")
    write_videos(str(tmp_path / "R" / "day2"), random_videos(rng, 3, lengths=(12, 20)), files=1)
    run_job(str(tmp_path / "R" / "*" / "*"), old, *flags)   # verified: the new tables too
    spec = readers.load_spec(old)
    shards = spec.splits["train"].shards
    assert spec.format_version == FORMAT_VERSION and len(spec.generations) == 2
    assert [s.table is not None for s in shards] == [False, True]
    with pytest.raises(ValueError, match=rf"split 'train' of {old} has 1 of its 2 shards "
                                         r"without a window table .*run [0-9a-f]{12}\), so "
                                         "select= cannot choose"):
        WindowSource(old, "train", select=Select(min_valid_frames=2))
    assert len(WindowSource(old, "train")) == spec.splits["train"].windows


def test_requests_that_cannot_be_selections_are_refused_in_one_line(fire):
    for select, error, needle in (
            ("exp1", TypeError, "select must be a readers.Select or None, not str"),
            (Select(min_valid_frames=WINDOW + 1), ValueError,
             f"have {WINDOW} frames; none has more"),
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


def _table_of(copy, shard, videos, valid) -> bytes:
    """A sound table of `shard` (its index's CRC as the job gives it) holding `videos`
    and `valid`."""
    return window_table.encode(videos, valid, shard.file, (copy / shard.index).read_bytes())


def _listing(copy, shard, table: bytes) -> None:
    """dataset.json of `copy` made to give `shard` the CRC of `table`."""
    meta = json.loads((copy / "dataset.json").read_text())
    entry = next(s for s in meta["splits"]["train"]["shards"] if s["file"] == shard.file)
    entry["table_crc32c"] = window_table.crc32c(table)
    (copy / "dataset.json").write_text(json.dumps(meta))


def test_a_damaged_table_is_one_line_naming_it_and_verify_finds_it(fire, tmp_path):
    copy = shutil.copytree(fire, tmp_path / "copy")
    shard = readers.load_spec(str(copy)).splits["train"].shards[1]
    data = bytearray((copy / shard.table).read_bytes())
    data[-1] ^= 1                                    # a valid count changed: the CRC fails
    (copy / shard.table).write_bytes(bytes(data))
    with pytest.raises(ValueError, match=rf"^{shard.table}: fails its CRC: it is damaged$"):
        WindowSource(str(copy), "train", select=Select(min_valid_frames=1))
    from readers.inspect.verify import verify
    assert verify(str(copy), readers.load_spec(str(copy))) == [
        f"{shard.table}: fails its CRC: it is damaged"]
    # a sound table, listed in dataset.json, whose entries are not its records': verify
    # compares them all
    with open(os.path.join(fire, shard.table), "rb") as f:
        table = window_table.decode(f.read(), shard, WINDOW)
    videos = table.videos.copy()
    videos[0] = window_table.video_hash("nobody")
    data = _table_of(copy, shard, videos, table.valid)
    (copy / shard.table).write_bytes(data)
    _listing(copy, shard, data)
    (problem,) = verify(str(copy), readers.load_spec(str(copy)))
    assert problem.startswith(f"{shard.table}: record 0 is of video ")
    assert "the table says another video with" in problem and "(1 records differ)" in problem
    # one made for other records (the index it names): told by verify alone
    other = readers.load_spec(str(copy)).splits["train"].shards[0]
    data = window_table.encode(table.videos, table.valid, shard.file,
                               (copy / other.index).read_bytes())
    (copy / shard.table).write_bytes(data)
    _listing(copy, shard, data)
    WindowSource(str(copy), "train", select=Select(min_valid_frames=1))
    (problem,) = verify(str(copy), readers.load_spec(str(copy)))
    assert re.fullmatch(rf"{shard.table}: gives its shard an index of CRC [0-9a-f]{{8}}, the "
                        rf"records of {shard.file} make one of CRC [0-9a-f]{{8}}: the shard or "
                        "its table was replaced", problem), problem


def _same_length_pair(path) -> tuple:
    shards = readers.load_spec(path).splits["train"].shards
    return next((a, b) for a in shards for b in shards
                if a is not b and a.examples == b.examples)


def _swapped(copy, shard, other) -> str:
    a, b = (copy / shard.table).read_bytes(), (copy / other.table).read_bytes()
    (copy / shard.table).write_bytes(b)
    (copy / other.table).write_bytes(a)
    return (rf"{shard.table}: the table of shard '{without_run_id(other.file)}', not of "
            rf"{shard.file}")


def _recounted(copy, shard, other) -> str:
    """Its valid counts changed and its CRC made anew: a sound table of its shard, but
    not the one dataset.json lists."""
    table = window_table.decode((copy / shard.table).read_bytes(), shard, WINDOW)
    (copy / shard.table).write_bytes(_table_of(copy, shard, table.videos,
                                               np.full_like(table.valid, WINDOW)))
    return (rf"{shard.table}: not the table dataset.json gives its shard \(its CRC is "
            r"[0-9a-f]{8}, dataset.json says [0-9a-f]{8}\)")


def _fifo(copy, shard, other) -> str:
    os.remove(copy / shard.table)
    os.mkfifo(copy / shard.table)
    return rf"{copy / shard.table}, which dataset.json lists, is a FIFO, not a regular file"


def _device(copy, shard, other) -> str:
    os.remove(copy / shard.table)
    os.symlink("/dev/zero", copy / shard.table)
    return (rf"{copy / shard.table}, which dataset.json lists, is a character device, not a "
            "regular file")


def _directory(copy, shard, other) -> str:
    os.remove(copy / shard.table)
    os.mkdir(copy / shard.table)
    return rf"{copy / shard.table}, which dataset.json lists, is a directory, not a regular"


def _sparse(copy, shard, other) -> str:
    with open(copy / shard.table, "r+b") as f:
        f.truncate(8 << 30)
    return (rf"{shard.table}: 8,589,934,592 bytes, where its entry in dataset.json allows "
            rf"{window_table.largest(shard):,} at most: the dataset is damaged")


@pytest.mark.parametrize("plant", [_swapped, _recounted, _fifo, _device, _directory, _sparse],
                         ids=lambda plant: plant.__name__.strip("_"))
def test_a_table_that_is_not_its_shards_is_refused_in_one_line_by_both_readers(
        fire, tmp_path, plant):
    """Tables of the same length swapped, or edited with their CRC made anew, chose
    another video's windows; a FIFO hung, /dev/zero or a sparse file was read without
    bound. Each is now one line naming the table, before a window is read, and
    --verify says the same."""
    copy = shutil.copytree(fire, tmp_path / "copy")
    shard, other = _same_length_pair(str(copy))
    needle = plant(copy, shard, other)
    opens = {"numpy": lambda: WindowSource(str(copy), "train", select=Select(videos=["exp1/run0"])),
             "tf.data": lambda: readers.make_dataset(str(copy), "train", 1,
                                                     select=Select(min_valid_frames=8))}
    for reader, open_ in opens.items():
        with concurrent.futures.ThreadPoolExecutor(1) as pool:   # a hang fails, not blocks
            running = pool.submit(open_)
            try:
                error = running.exception(60)
            except concurrent.futures.TimeoutError:
                with open(os.open(copy / shard.table, os.O_WRONLY | os.O_NONBLOCK), "wb"):
                    pass                                           # the reader's open returns
                pytest.fail(f"{reader} waits on {shard.table}")
        assert isinstance(error, ValueError) and re.search(needle, str(error)), (reader, error)
        assert "\n" not in str(error)
    from readers.inspect.verify import verify
    problems = verify(str(copy), readers.load_spec(str(copy)))
    assert any(re.search(needle, problem) for problem in problems), problems


def test_a_dataset_of_format_6_selects_by_its_tables_without_owners(fire, tmp_path):
    """Format 6 wrote tables that name no shard, and dataset.json gave no CRC of them:
    such a dataset still selects (and --verify passes it); a table of either format in
    the other's place is refused."""
    copy = _as_format_6(shutil.copytree(fire, tmp_path / "copy"))
    spec = readers.load_spec(str(copy))
    select = SELECTIONS["fire story"][0]
    assert _keys(WindowSource(str(copy), "train", select=select).read_batch(slice(None))) == (
        _keys(WindowSource(fire, "train", select=select).read_batch(slice(None))))
    assert_verified(str(copy))
    shard = spec.splits["train"].shards[0]
    old_table = (copy / shard.table).read_bytes()
    shutil.copy(os.path.join(fire, shard.table), copy / shard.table)
    with pytest.raises(ValueError, match=f"^{shard.table}: a table of format 7, where "
                                         "dataset.json gives no CRC for it$"):
        WindowSource(str(copy), "train", select=Select(min_valid_frames=1))
    newer = shutil.copytree(fire, tmp_path / "newer")
    (newer / shard.table).write_bytes(old_table)
    with pytest.raises(ValueError, match=f"^{shard.table}: a table of format 6, where "
                                         "dataset.json gives the CRC of one of format 7$"):
        WindowSource(str(newer), "train", select=select)


def _as_format_6(copy):
    """`copy`, a dataset of format 7, made as format 6 wrote it: tables without an owner,
    no CRC of them in dataset.json, generations without their format, rows of the videos
    file without metadata and fields."""
    name = readers.load_spec(str(copy)).sidecars["videos"]
    rows = [{key: value for key, value in json.loads(line).items()
             if key not in ("metadata", "fields")}
            for line in (copy / name).read_text().splitlines()]
    (copy / name).write_text("".join(json.dumps(row, sort_keys=True) + "\n" for row in rows))
    meta = json.loads((copy / "dataset.json").read_text())
    meta["format_version"] = 6
    for generation in meta["generations"]:
        del generation["format_version"]
    spec = readers.load_spec(str(copy))
    for name, split in meta["splits"].items():
        for entry, shard in zip(split["shards"], spec.splits[name].shards, strict=True):
            table = window_table.decode((copy / shard.table).read_bytes(), shard,
                                        spec.window.length)
            del entry["table_crc32c"]
            (copy / shard.table).write_bytes(_format_6_table(table))
    (copy / "dataset.json").write_text(json.dumps(meta))
    return copy


@pytest.mark.slow
def test_an_append_onto_a_dataset_of_format_6_selects_across_both_kinds_of_table(tmp_path):
    from helpers import random_videos, write_videos

    rng = np.random.default_rng(9)
    flags = ["--window", "4", "--stride", "2", "--append", "--num_shards", "2"]
    write_videos(str(tmp_path / "R" / "day1"), random_videos(rng, 4, lengths=(12, 20)), files=1)
    run_job(str(tmp_path / "R" / "*" / "*"), tmp_path / "out", *flags)
    _as_format_6(tmp_path / "out")
    write_videos(str(tmp_path / "R" / "day2"), random_videos(rng, 3, lengths=(12, 20)), files=1)
    run_job(str(tmp_path / "R" / "*" / "*"), tmp_path / "out", *flags)   # verified
    spec = readers.load_spec(str(tmp_path / "out"))
    old, new = spec.generations
    assert (spec.format_version, old.format_version, new.format_version) == (
        FORMAT_VERSION, None, FORMAT_VERSION)
    assert [s.table_crc32c is None for s in spec.splits["train"].shards] == [
        True, True, False, False]
    whole = _whole(str(tmp_path / "out"))
    chosen = sorted(set(whole["video_id"].tolist()))[::2]     # of both generations
    kept = np.isin(whole["video_id"], chosen)
    selected = WindowSource(str(tmp_path / "out"), "train",
                            select=Select(videos=[v.decode() for v in chosen]))
    assert 0 < kept.sum() < len(kept)
    assert _keys(selected.read_batch(slice(None))) == _keys({k: v[kept] for k, v in
                                                             whole.items()})
    # the rows of format 6 have no metadata: a `where` that reads it names one in one line
    rows = _rows(str(tmp_path / "out"))
    old = sorted(v for v, row in rows.items() if "metadata" not in row)
    assert len(old) == 4 and all(len(rows[v]["metadata"]) == 4 for v in rows if v not in old)
    first = next(v for v in old if rows[v]["split"] == "train")
    by_recipe = Select(where=lambda row: row["metadata"][0] > 0.5)
    for read in (WindowSource, functools.partial(readers.make_dataset, batch_size=1)):
        with pytest.raises(ValueError) as refused:
            read(str(tmp_path / "out"), "train", select=by_recipe)
        assert str(refused.value) == (
            f"{tmp_path / 'out' / spec.sidecars['videos']}: where test_select.test_an_append_"
            "onto_a_dataset_of_format_6_selects_across_both_kinds_of_table.<locals>.<lambda> "
            f"failed on video {first!r} (KeyError: 'metadata'): its row has no metadata and "
            "no fields, as rows written before format 7 have none (--append keeps them as "
            "they were): rebuild the dataset with --overwrite to select by them")


def _format_6_table(table) -> bytes:
    """The bytes format 6 wrote for a table: its header and entries, no owner."""
    width = table.valid.dtype.itemsize
    body = table.videos.astype("<u8").tobytes() + table.valid.astype(f"<u{width}").tobytes()
    return struct.pack("<8sQIB3s", b"VWSTAB01", len(table.videos),
                       google_crc32c.value(body), width, b"\0" * 3) + body


def test_a_shard_without_the_table_its_run_wrote_is_damage_not_an_old_append(fire, tmp_path,
                                                                            capsys):
    """A table's entry removed from dataset.json read as a shard of a run before format
    6, and --verify passed it: it is now refused, naming the shard and its run."""
    copy = shutil.copytree(fire, tmp_path / "copy")
    meta = json.loads((copy / "dataset.json").read_text())
    entry = meta["splits"]["train"]["shards"][2]
    del entry["table"], entry["table_crc32c"]
    (copy / "dataset.json").write_text(json.dumps(meta))
    needle = (f"splits.train.shards[2]: shard {entry['file']} has no window table, which its "
              f"run {meta['run_id']} (format {FORMAT_VERSION}) wrote for each of its shards: "
              "dataset.json is damaged")
    with pytest.raises(readers.format.SpecError) as refused:
        WindowSource(str(copy), "train", select=Select(min_valid_frames=1))
    assert str(refused.value).endswith(needle)
    from readers.inspect import command as inspect
    with pytest.raises(SystemExit) as verified:
        inspect.main([str(copy), "--verify"])
    assert verified.value.code == 2
    assert capsys.readouterr().err.splitlines()[-1].endswith(needle)


def test_verify_holds_the_videos_file_to_the_shards_windows(fire, tmp_path):
    """A video id edited in the videos file passed --verify, and selection failed later."""
    copy = shutil.copytree(fire, tmp_path / "copy")
    name = readers.load_spec(str(copy)).sidecars["videos"]
    text = (copy / name).read_text()
    (copy / name).write_text(text.replace('"exp1/run3"', '"exp1/run9"'))
    from readers.inspect.verify import verify
    assert verify(str(copy), readers.load_spec(str(copy))) == [
        f"{name}: video 'exp1/run9' has {_rows(fire)['exp1/run3']['windows']} windows in split "
        "'train' by its row, the shards hold 0 in split 'train'",
        f"{name}: no row for video 'exp1/run3', whose windows the shards hold (1 such videos)"]
    # a row's metadata edited: a selection by it would choose other windows
    rows = [json.loads(line) for line in text.splitlines()]
    row = next(r for r in rows if r["video_id"] == "exp1/run3")
    assert row["metadata"] == [1.0, 1.0]        # as the manifest gave them: [v % 2, v % 3 + 1]
    row["metadata"] = [0.0, 1.0]
    (copy / name).write_text("".join(json.dumps(r) + "\n" for r in rows))
    assert verify(str(copy), readers.load_spec(str(copy))) == [
        f"{name}: video 'exp1/run3' has metadata [0.0, 1.0] by its row, not what its "
        "windows carry"]


def test_the_table_format_round_trips_and_refuses_what_it_is_not():
    videos = [window_table.video_hash(f"v{i}") for i in range(5)]
    text = index.encode([0, 10, 20, 30, 40, 50])
    shard = Shard("train-00000-of-00001.tfrecord", 5, table="t")
    for valid in ([0, 1, 16, 3, 16], [300, 0, 5, 65535, 1], [70000, 0, 0, 0, 1]):
        data = window_table.encode(videos, valid, shard.file, text)
        width = {16: 1, 65535: 2, 70000: 4}[max(valid)]
        assert len(data) == 24 + 8 + 32 + 5 * (8 + width) <= window_table.largest(shard)
        listed = dataclasses.replace(shard, table_crc32c=window_table.crc32c(data))
        got = window_table.decode(data, listed, max(valid))
        assert got.videos.tolist() == videos and got.valid.tolist() == valid
        assert got.index_crc32c == google_crc32c.value(text)
    data = window_table.encode(videos, [1, 2, 3, 4, 5], shard.file, text)
    shard = dataclasses.replace(shard, table_crc32c=window_table.crc32c(data))
    for bad, needle in ((data[:20], "20 bytes, too short"), (b"X" + data[1:], "not a window table"),
                        (data + b"\0", "has 109"), (data[:-1], "has 109")):
        with pytest.raises(window_table.TableError, match=needle):
            window_table.decode(bad, shard, 5)
    with pytest.raises(window_table.TableError, match="a table of 5 records, dataset.json "
                                                      "gives its shard 6"):
        window_table.decode(data, dataclasses.replace(shard, examples=6), 5)
    with pytest.raises(window_table.TableError, match="record 4 has 5 valid frames, more "
                                                      "than the window's 4"):
        window_table.decode(data, shard, 4)
    with pytest.raises(window_table.TableError, match="the table of shard 'train-00000-of-"
                                                      "00001.tfrecord', not of val-"):
        window_table.decode(data, dataclasses.replace(shard, file="val-00000-of-00001.tfrecord"),
                            5)
    empty = window_table.encode([], [], shard.file, b"")
    assert window_table.decode(empty, dataclasses.replace(
        shard, examples=0, table_crc32c=window_table.crc32c(empty)), 4).videos.size == 0


@pytest.mark.slow
def test_on_gcs_opening_a_selection_reads_the_tables_and_no_shard(kinds):
    local = kinds["latent"]
    with gcs_emulator.running("bkt"):
        gcs_emulator.upload(local, "bkt/out")
        WindowSource("gs://bkt/out", "train", select=Select(min_valid_frames=4))
        by_valid = gcs_emulator.counts()
        gcs_emulator.reset_counts()
        source = WindowSource("gs://bkt/out", "train", select=Select(
            exclude_videos=[_keys(_whole(local))[0][0]]))
        by_video = gcs_emulator.counts()
        remote = source[[0, 5, len(source) - 1]]
        gcs_emulator.reset_counts()
        by_recipe = len(WindowSource("gs://bkt/out", "train", select=Select(
            where=lambda row: row["metadata"][0] > 0.5)))
        by_metadata = gcs_emulator.counts()
    shards = readers.load_spec(local).splits["train"].shards
    # dataset.json, then each shard's table (no shard, no index); the videos file too
    # when videos are chosen
    assert by_valid["read"] == 1 + len(shards) and by_valid["bytes_read"] < 20_000, by_valid
    assert by_video["read"] == by_metadata["read"] == 2 + len(shards), by_metadata
    whole = _whole(local)
    assert by_recipe == (whole["metadata"][:, 0] > 0.5).sum() > 0
    here = WindowSource(local, "train", select=Select(
        exclude_videos=[_keys(_whole(local))[0][0]]))
    assert _keys(remote) == _keys(here[[0, 5, len(here) - 1]])
