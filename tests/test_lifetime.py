"""A dataset over many runs: ids that do not depend on the glob, failures remembered, the
videos file checked, and each run's end (a kill at any commit step, a paused run that
lost its lease, Ctrl-C during imports, SIGTERM) leaving the directory whole and the next
run committing with no hand work."""
import json
import os
import shutil
import signal
import subprocess
import sys
import time

import numpy as np
import psutil
import pytest

import readers
from beam_jobs import make_shards
from helpers import (assert_verified, dataset_bytes, job_line, latent_example, random_videos,
                     read_dataset_json, read_examples, run_job, sidecar, write_records,
                     write_videos)
from readers.format import tfds_info

FLAGS = ["--window", "4", "--stride", "2", "--splits", "train=0.5,val=0.5"]
SPLITS = ("train", "val")


def _rows(out, kind: str) -> list[dict]:
    with open(sidecar(out, kind)) as f:
        return [json.loads(line) for line in f]


def _ids_by_split(out) -> dict[str, set]:
    return {split: {e["video_id"] for e in read_examples(str(out), split)} for split in SPLITS}


@pytest.fixture(scope="module")
def day1(tmp_path_factory):
    """R/day1 (16 videos in two files) built into a dataset, as the first day's run."""
    root = tmp_path_factory.mktemp("days")
    write_videos(str(root / "R" / "day1"), random_videos(np.random.default_rng(3), 16), files=2)
    run_job(str(root / "R" / "day1" / "*.tfrecord"), root / "out", *FLAGS)
    return root


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
    for day in (2, 3):   # the bad record is read again each day, and never counts again
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
    write = lambda frames: write_records(str(tmp_path / "in" / "part.tfrecord"), [
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
_KILL_AT = r"""
import os, sys
from beam_jobs import make_shards, outdir
from beam_jobs.core import storage
step, calls = int(sys.argv[1]), [0]
def dying(function):
    def call(*args, **kwargs):
        calls[0] += 1
        if calls[0] == step:
            os._exit(9)
        return function(*args, **kwargs)
    return call
storage.place = dying(storage.place)                      # each side file, then dataset.json
outdir.write_derived = dying(outdir.write_derived)          # dataset_info.json
outdir.clean_up_after_commit = dying(outdir.clean_up_after_commit)
sys.exit(make_shards.main(sys.argv[2:]))
"""
_STEPS = ["before the videos file moves", "before the failures file moves",
          "before dataset.json moves", "before dataset_info.json is rewritten",
          "before the cleanup"]


@pytest.mark.slow
@pytest.mark.parametrize("append", [False, True], ids=["overwrite", "append"])
def test_a_kill_between_any_two_commit_steps_leaves_old_or_new_and_the_rerun_commits(
        day1, tmp_path, append):
    root = day1
    write_videos(str(root / "R" / "more"), random_videos(np.random.default_rng(9), 3), files=1)
    glob = str(root / "R" / ("*" if append else "day1") / "*.tfrecord")
    mode = "--append" if append else "--overwrite"
    window = [] if append else ["--stride", "3"]   # an overwrite that changes the windows
    for step, where in enumerate(_STEPS, start=1):
        out = tmp_path / f"out{step}"
        shutil.copytree(day1 / "out", out)
        old = dataset_bytes(out)
        killed = subprocess.run(
            [sys.executable, "-c", _KILL_AT, str(step), "--input", glob, "--output_dir",
             str(out), *FLAGS, *window, mode], capture_output=True, text=True)
        assert killed.returncode == 9, (where, killed.stderr[-2000:])
        now = dataset_bytes(out)
        meta = json.loads(now["dataset.json"])
        new = meta["run_id"] != json.loads(old["dataset.json"])["run_id"]
        assert new == (step > 3), where
        # every file a reader reads is the old dataset's or the new one's, whole: what
        # dataset.json lists that was there before is byte for byte what it was
        for name in meta["files"]:
            assert name in now, (where, name)
            if name in old and name != "dataset_info.json":
                assert now[name] == old[name], (where, name)
        if not new:
            assert now["dataset.json"] == old["dataset.json"], where
        spec = readers.load_spec(str(out))
        info = now["dataset_info.json"]
        old_info = tfds_info.files(readers.format.DatasetSpec.from_json(old["dataset.json"]))
        assert info in (tfds_info.files(spec)["dataset_info.json"],
                        old_info["dataset_info.json"]), where
        assert_verified(out)
        # the rerun commits, with no hand work, and leaves nothing behind
        make_shards.run(["--input", glob, "--output_dir", str(out), *FLAGS, *window, mode])
        assert_verified(out)
        assert not os.path.exists(out / "_make_shards"), where
        listed = set(read_dataset_json(out)["files"]) | {"dataset.json"}
        assert set(os.listdir(out)) == listed, where


@pytest.mark.slow
def test_a_paused_run_that_lost_its_lease_commits_nothing_and_blocks_no_one(day1, tmp_path):
    """Run A holds the lease and is paused (SIGSTOP) past its expiry; B takes over and
    commits; A, continued, writes its shards, then fails in one line at its commit. The
    next run clears what A wrote: nothing locks the directory."""
    out = tmp_path / "out"
    shutil.copytree(day1 / "out", out)
    glob = str(day1 / "R" / "day1" / "*.tfrecord")
    a = subprocess.Popen([sys.executable, "-m", "beam_jobs.make_shards", "--input", glob,
                          "--output_dir", str(out), *FLAGS, "--stride", "3", "--overwrite"],
                         stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    path = out / "_make_shards" / "lease.json"
    deadline = time.monotonic() + 120
    while not path.exists() and time.monotonic() < deadline:
        time.sleep(0.01)
    os.kill(a.pid, signal.SIGSTOP)
    try:
        held = json.loads(path.read_text())
        held["expires"] = time.time() - 1   # as if 120 s went by without a renewal
        path.write_text(json.dumps(held))
        run_job(glob, out, *FLAGS, "--overwrite")   # B
        b = read_dataset_json(out)["run_id"]
        assert os.listdir(out / "_make_shards" / "runs") == [held["run_id"]]
    finally:
        os.kill(a.pid, signal.SIGCONT)
    status = a.wait(timeout=300)
    last = a.stderr.read().strip().splitlines()[-1]
    # where it was paused: still starting (refused), or running (fails at its commit)
    expected = {2: "while this one started", 1: "commits nothing"}
    assert "another run took the lease" in last and expected.get(status, "?") in last, last
    assert read_dataset_json(out)["run_id"] == b
    assert_verified(out)
    # C: whatever A wrote is A's (named with its id), removed; nothing refused
    run_job(glob, out, *FLAGS, "--overwrite")
    assert not [n for n in os.listdir(out) if held["run_id"] in n]
    assert_verified(out)


@pytest.mark.slow
def test_leftovers_of_the_lease_and_of_beam_go_with_the_next_run(tmp_path, rng):
    """A kill inside the lease's write or release leaves its temp or aside file; a kill
    of a running pipeline leaves Beam's temp folder, which is in the run's folder, not
    the system's temp directory. The next run removes all of them."""
    write_videos(str(tmp_path / "in"), random_videos(rng, 8, lengths=(100, 120), dim=8),
                 files=2)
    out, temp = tmp_path / "out", tmp_path / "tmp"
    temp.mkdir()
    argv = [sys.executable, "-m", "beam_jobs.make_shards", "--input", str(tmp_path / "in" / "*"),
            "--output_dir", str(out), "--window", "4", "--spill_buffer_mb", "0.2"]
    env = {**os.environ, "TMPDIR": str(temp)}
    job = subprocess.Popen(argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    runs = out / "_make_shards" / "runs"
    deadline = time.monotonic() + 120
    while not list(runs.glob("*/shards.json")) and time.monotonic() < deadline:
        time.sleep(0.01)   # shards.json: written by the pipeline, once Beam built it
    job.kill()
    job.wait()
    assert not [n for n in os.listdir(temp) if n.startswith("beam-pipeline-temp")]
    for suffix in ("tmp", "stale"):
        (out / "_make_shards" / f"lease.json.{'ab' * 16}.{suffix}").write_text("{}")
    done = subprocess.run(argv, env=env, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-2000:]
    assert not (out / "_make_shards").exists()
    assert not [n for n in os.listdir(temp) if n.startswith("beam-pipeline-temp")]
    assert_verified(out)


def _handles(pid: int, signum: int) -> bool:
    """Whether the process has a handler of its own for `signum` (Linux's SigCgt)."""
    with open(f"/proc/{pid}/status") as f:
        caught = next(line for line in f if line.startswith("SigCgt:")).split()[1]
    return bool(int(caught, 16) >> (signum - 1) & 1)


@pytest.mark.skipif(not os.path.exists("/proc/self/status"), reason="needs Linux's /proc")
@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM], ids=["ctrl-c", "sigterm"])
def test_a_signal_while_the_command_imports_is_one_line(tmp_path, signum):
    """Sent once the command's first handler is in place (Python's own catches only
    SIGINT; SIGTERM is caught from then on), whatever it is importing then."""
    write_videos(str(tmp_path / "in"), random_videos(np.random.default_rng(1), 2), files=1)
    job = subprocess.Popen([sys.executable, "-m", "beam_jobs.make_shards", "--input",
                            str(tmp_path / "in" / "*"), "--output_dir", str(tmp_path / "out"),
                            "--window", "4"],
                           stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 60
    while not _handles(job.pid, signal.SIGTERM) and time.monotonic() < deadline:
        time.sleep(0.001)
    job.send_signal(signum)
    status = job.wait(timeout=120)
    err = job.stderr.read()
    assert status == 130 and "Traceback" not in err, err[-2000:]
    # (the same line whenever it comes before the commit, in the imports or after)
    assert err.strip().splitlines()[-1].startswith(
        "python -m beam_jobs.make_shards: interrupted: nothing was committed"), err[-500:]
    assert not os.path.exists(tmp_path / "out" / "dataset.json")


@pytest.mark.slow
@pytest.mark.parametrize("workers", [[], ["--all_cores", "--direct_num_workers", "2",
                                         "--direct_running_mode", "multi_processing"]],
                         ids=["one process", "worker processes"])
def test_sigterm_stops_a_run_like_ctrl_c(day1, tmp_path, workers):
    out = tmp_path / "out"
    shutil.copytree(day1 / "out", out)
    before = dataset_bytes(out)
    job = subprocess.Popen([sys.executable, "-m", "beam_jobs.make_shards", "--input",
                            str(day1 / "R" / "day1" / "*.tfrecord"), "--output_dir", str(out),
                            *FLAGS, "--stride", "3", "--overwrite", *workers],
                           stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    runs = out / "_make_shards" / "runs"
    deadline = time.monotonic() + 120
    while not list(runs.glob("*/shards.json")) and time.monotonic() < deadline:
        time.sleep(0.01)
    children = psutil.Process(job.pid).children(recursive=True)
    job.send_signal(signal.SIGTERM)
    status = job.wait(timeout=300)
    err = job.stderr.read()
    lines = err.strip().splitlines()
    if status == 0:   # it committed before the signal came: then that is what it says
        assert read_dataset_json(out)["window"]["stride"] == 3
        return
    assert status == 130 and "Traceback" not in err, err[-3000:]
    assert lines[-1].endswith(f"interrupted: nothing was committed; {out} holds what it "
                              "held before"), lines[-1]
    assert dataset_bytes(out) == before
    _, alive = psutil.wait_procs(children, timeout=30)
    assert not alive   # its workers stopped with it
