"""A dataset over many runs: ids that do not depend on the glob, failures remembered
across generations (tests/test_kills.py: how each run's end leaves the directory)."""
import json
import os
import shutil

import numpy as np
import pytest
from helpers import (
    assert_verified,
    dataset_bytes,
    first_day,
    job_line,
    read_dataset_json,
    read_examples,
    run_job,
    sidecar,
)
from input_files import latent_example, random_videos, write_records, write_videos

from beam_jobs import make_shards
from beam_jobs.cut.digest import BLAKE3, SHA256, FrameDigest

FLAGS = ["--window", "4", "--stride", "2", "--splits", "train=0.5,val=0.5"]
SPLITS = ("train", "val")


def _rows(out, kind: str) -> list[dict]:
    with open(sidecar(out, kind)) as f:
        return [json.loads(line) for line in f]


def _ids_by_split(out) -> dict[str, set]:
    return {split: {e["video_id"] for e in read_examples(str(out), split)} for split in SPLITS}


@pytest.fixture(scope="module")
def day1(tmp_path_factory):
    return first_day(tmp_path_factory.mktemp("days"), FLAGS)


@pytest.mark.slow
def test_a_wider_glob_a_renamed_file_and_a_second_glob_add_no_video_twice(day1, tmp_path):
    root, out = day1, tmp_path / "out"
    shutil.copytree(day1 / "out", out)
    first = _rows(out, "videos")
    write_videos(str(root / "R" / "day2"), random_videos(np.random.default_rng(4), 4), files=1)
    # The next day's glob covers day1 too: its videos come under new ids (day1/...)
    run_job(str(root / "R" / "day*" / "*.tfrecord"), out, *FLAGS, "--append")
    rows = _rows(out, "videos")
    assert len(rows) == 20 and len({r["video_id"] for r in rows}) == 20
    assert len({r["digest"] for r in rows}) == 20
    assert {r["video_id"] for r in first} < {r["video_id"] for r in rows}
    by_split = _ids_by_split(out)
    assert not by_split["train"] & by_split["val"]
    meta = read_dataset_json(out)
    assert meta["generations"][1]["skipped_existing"] == 16
    assert meta["generations"][1]["videos"] + meta["generations"][1]["skipped_short"] == 4
    # A renamed file, then a second glob over files the dataset has: nothing new
    os.rename(root / "R" / "day1" / "lat-0.tfrecord", root / "R" / "day1" / "renamed.tfrecord")
    try:
        before = dataset_bytes(out)
        for inputs in (["--input", str(root / "R" / "day1" / "*.tfrecord")],
                       ["--input", str(root / "R" / "day1" / "*.tfrecord"),
                        "--input", str(root / "R" / "day2" / "*.tfrecord")]):
            make_shards.run([*inputs, "--output_dir", str(out), *FLAGS, "--append"])
            assert dataset_bytes(out) == before   # nothing new, nothing left behind
    finally:
        os.rename(root / "R" / "day1" / "renamed.tfrecord", root / "R" / "day1" / "lat-0.tfrecord")
    assert_verified(out)


def _digest(frames: np.ndarray, recipe: np.ndarray, scheme: str) -> str:
    digest = FrameDigest(recipe, scheme)
    digest.add_sequence(frames)
    return digest.hexdigest()


def test_an_append_to_a_dataset_of_sha256_digests_goes_on_with_them(day1, tmp_path):
    """A dataset written before BLAKE3 holds 32 hex digits of SHA-256: an append to it
    digests its new videos so too, and so still recognises its videos under new ids."""
    root, out = day1, tmp_path / "out"
    shutil.copytree(day1 / "out", out)
    videos = random_videos(np.random.default_rng(3), 16)   # first_day's, round-robin
    path = sidecar(out, "videos")
    rows = _rows(out, "videos")
    for row in rows:
        file = int(row["source"].removesuffix(".tfrecord")[-1])
        frames, recipe = videos[2 * row["record_index"] + file]
        assert row["digest"] == _digest(frames, recipe, BLAKE3)   # 64 hex digits
        row["digest"] = _digest(frames, recipe, SHA256)            # as it was written
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    new = random_videos(np.random.default_rng(4), 2, lengths=(8, 9))
    write_videos(str(root / "R" / "day2"), new, files=1)
    # day1's videos come under new ids (day1/...): known by their SHA-256 digests only
    run_job(str(root / "R" / "day*" / "*.tfrecord"), out, *FLAGS, "--append")
    assert read_dataset_json(out)["generations"][1]["skipped_existing"] == 16
    added = [row for row in _rows(out, "videos") if row["video_id"].startswith("day2/")]
    assert sorted(row["digest"] for row in added) == sorted(
        _digest(frames, recipe, SHA256) for frames, recipe in new)


@pytest.mark.slow
def test_two_copies_of_one_recording_in_one_run_are_one_video(tmp_path):
    videos = random_videos(np.random.default_rng(5), 6)
    write_videos(str(tmp_path / "R" / "a"), videos, files=1)
    write_videos(str(tmp_path / "R" / "b"), videos[:2], files=1)   # a copy of two of them
    run_job(str(tmp_path / "R" / "*" / "*.tfrecord"), tmp_path / "out", *FLAGS)
    rows = _rows(tmp_path / "out", "videos")
    assert len(rows) == 6 and all(r["video_id"].startswith("a/") for r in rows)
    assert read_dataset_json(tmp_path / "out")["generations"][0]["skipped_existing"] == 2


def _with_a_bad_record(path, rng, good: int) -> None:
    """`good` records, the first of which fails its data's CRC (its id unreadable)."""
    write_records(str(path), [latent_example(f, r) for f, r in random_videos(rng, good)])
    data = bytearray(path.read_bytes())
    data[20] ^= 0xFF   # inside the first record's data
    path.write_bytes(bytes(data))


@pytest.mark.slow
def test_a_failed_video_is_remembered_and_never_blocks_an_append(tmp_path):
    rng = np.random.default_rng(6)
    _with_a_bad_record(tmp_path / "R" / "day1" / "part-0.tfrecord", rng, 21)  # 1 of 21 bad
    run_job(str(tmp_path / "R" / "day1" / "*"), tmp_path / "out", *FLAGS)
    assert read_dataset_json(tmp_path / "out")["failures"] == 1
    write_videos(str(tmp_path / "R" / "day2"), random_videos(rng, 2), files=1)
    for _day in (2, 3):   # the bad record is read again each day, and never counts again
        run_job(str(tmp_path / "R" / "day*" / "*"), tmp_path / "out", *FLAGS, "--append")
        meta = read_dataset_json(tmp_path / "out")
        assert meta["failures"] == 1 and [g["failures"] for g in meta["generations"]] == [1, 0]
    (row,) = _rows(tmp_path / "out", "failures")
    assert row["record_index"] == 0 and "CRC" in row["reason"]


@pytest.mark.slow
def test_failed_ids_are_skipped_until_retried(tmp_path):
    """A video that failed by id (NaN values) is skipped by later appends; with
    --retry_failed it is read again, and once it reads its failure row goes."""
    rng = np.random.default_rng(8)
    videos = random_videos(rng, 6)
    bad = videos[2][0].copy()
    bad[3, 0] = np.nan

    def write(frames):
        write_records(str(tmp_path / "in" / "part.tfrecord"), [
            latent_example(f if i != 2 else frames, r, video_id=f"v{i}")
            for i, (f, r) in enumerate(videos)])
    write(bad)
    argv = [*FLAGS, "--id_feature", "vid", "--max_failure_fraction", "0.2"]
    run_job(str(tmp_path / "in" / "*"), tmp_path / "out", *argv)
    assert [r["video_id"] for r in _rows(tmp_path / "out", "failures")] == ["v2"]
    write(videos[2][0])   # fixed in place
    before = dataset_bytes(tmp_path / "out")
    run_job(str(tmp_path / "in" / "*"), tmp_path / "out", *argv, "--append")
    assert dataset_bytes(tmp_path / "out") == before   # v2 skipped: nothing new
    run_job(str(tmp_path / "in" / "*"), tmp_path / "out", *argv, "--append", "--retry_failed")
    assert _rows(tmp_path / "out", "failures") == []
    assert "v2" in {r["video_id"] for r in _rows(tmp_path / "out", "videos")}
    assert read_dataset_json(tmp_path / "out")["failures"] == 0


def test_retry_failed_needs_append(tmp_path, capsys):
    line = job_line(capsys, "--input", tmp_path / "x", "--output_dir", tmp_path / "o",
                    "--window", "4", "--retry_failed")
    assert "--retry_failed" in line and "--append" in line


# The commit's steps a kill may fall between: each a call the commit makes, in order.
