"""How a run's end leaves the directory, whenever it comes: a kill at any commit step, a
paused run that lost its lease, the leftovers of a kill, Ctrl-C or SIGTERM during the
imports or the run. Each leaves the directory whole, and the next run commits with no
hand work (tests/test_chaos.py: the same at random moments)."""
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
from helpers import (
    assert_documented_exit,
    assert_verified,
    dataset_bytes,
    first_day,
    overriding,
    read_dataset_json,
    run_job,
)
from input_files import random_videos, write_videos
from job_process import DieAtCommitStep, JobProcess, StopAfterLease, StopAtCommit

import readers
from beam_jobs import make_shards
from readers.format import tfds_info

FLAGS = ["--window", "4", "--stride", "2", "--splits", "train=0.5,val=0.5"]


@pytest.fixture(scope="module")
def day1(tmp_path_factory):
    return first_day(tmp_path_factory.mktemp("days"), FLAGS)


_STEPS = ["before the videos file moves", "before the failures file moves",
          "before dataset.json moves", "before dataset_info.json is rewritten",
          "before the cleanup"]


@pytest.mark.slow
def test_a_kill_between_any_two_commit_steps_leaves_old_or_new_and_the_rerun_commits(
        day1, tmp_path):
    """An append (its commit has every step an overwrite's has, and keeps the old
    shards; benchmarks/chaos.py kills overwrites too)."""
    root = day1
    write_videos(str(root / "R" / "more"), random_videos(np.random.default_rng(9), 3), files=1)
    glob, mode, window = str(root / "R" / "*" / "*.tfrecord"), "--append", []
    for step, where in enumerate(_STEPS, start=1):
        out = tmp_path / f"out{step}"
        shutil.copytree(day1 / "out", out)
        old = dataset_bytes(out)
        killed = JobProcess(["--input", glob, "--output_dir", out, *FLAGS, *window, mode],
                            prepare=DieAtCommitStep(step))
        assert killed.wait() == 9, (where, killed.stderr.read()[-2000:])
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
    a = JobProcess(["--input", glob, "--output_dir", out, *overriding(FLAGS, "--stride", "3"),
                    "--overwrite"])
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
    assert_documented_exit(status, last)
    assert read_dataset_json(out)["run_id"] == b
    assert_verified(out)
    # C: whatever A wrote is A's (named with its id), removed; nothing refused
    run_job(glob, out, *FLAGS, "--overwrite")
    assert not [n for n in os.listdir(out) if held["run_id"] in n]
    assert_verified(out)


def _stopped(job: JobProcess) -> None:
    """Wait until `job` has stopped itself (SIGSTOP)."""
    deadline = time.monotonic() + 120
    while psutil.Process(job.pid).status() != psutil.STATUS_STOPPED:
        assert job.poll() is None and time.monotonic() < deadline, job.stderr.read()
        time.sleep(0.05)


@pytest.mark.slow
def test_a_run_that_lost_its_lease_at_its_commit_says_so_in_one_line(day1, tmp_path):
    """Run A is paused as its Commit step starts, past its lease's expiry; B takes over
    and commits. A, continued, finds at its commit that it lost the lease: its stderr
    holds its one line and no traceback (Beam's log of the step's error is at debug
    level). Then A is gone, and the next run removes its folder's marker too."""
    out = tmp_path / "out"
    shutil.copytree(day1 / "out", out)
    glob = str(day1 / "R" / "day1" / "*.tfrecord")
    a = JobProcess(["--input", glob, "--output_dir", out, *FLAGS, "--overwrite"],
                   prepare=StopAtCommit())
    _stopped(a)
    path = out / "_make_shards" / "lease.json"
    try:
        held = json.loads(path.read_text())
        held["expires"] = time.time() - 1   # as if 120 s went by without a renewal
        path.write_text(json.dumps(held))
        run_job(glob, out, *FLAGS, "--overwrite")   # B
        marker = out / "_make_shards" / "runs" / held["run_id"] / "lost_lease.json"
        assert json.loads(marker.read_text())["pid"] == a.pid
    finally:
        os.kill(a.pid, signal.SIGCONT)
    assert a.wait(timeout=300) == 1
    said = a.stderr.read()
    assert "Traceback" not in said and "ERROR" not in said, said
    errors = [line for line in said.splitlines() if "error" in line.lower()]
    assert errors == [said.strip().splitlines()[-1]], said
    assert "another run took the lease" in errors[0] and "commits nothing" in errors[0]
    assert errors[0].count("another run took the lease") == 1
    assert_documented_exit(1, errors[0])
    run_job(glob, out, *FLAGS, "--overwrite")   # C: A's process is gone, so is its marker
    assert not os.path.exists(out / "_make_shards")
    assert_verified(out)


@pytest.mark.slow
def test_a_run_paused_right_after_it_took_its_lease_is_refused_in_one_line(day1, tmp_path):
    """Run A is paused as soon as it holds the lease, still starting; B takes over and
    commits. A, continued, finds its lease gone before it has written anything of its
    own there: refused, exit 2, the line docs/guarantees.md gives for it."""
    out = tmp_path / "out"
    shutil.copytree(day1 / "out", out)
    glob = str(day1 / "R" / "day1" / "*.tfrecord")
    a = JobProcess(["--input", glob, "--output_dir", out, *FLAGS, "--overwrite"],
                   prepare=StopAfterLease())
    path = out / "_make_shards" / "lease.json"
    try:
        _stopped(a)
        held = json.loads(path.read_text())
        held["expires"] = time.time() - 1   # as if 120 s went by without a renewal
        path.write_text(json.dumps(held))
        run_job(glob, out, *FLAGS, "--overwrite")   # B
        b = read_dataset_json(out)["run_id"]
    finally:
        os.kill(a.pid, signal.SIGCONT)
    assert a.wait(timeout=300) == 2
    last = a.stderr.read().strip().splitlines()[-1]
    assert "another run took the lease while this one started" in last, last
    assert_documented_exit(2, last)
    assert read_dataset_json(out)["run_id"] == b
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
    argv = ["--input", tmp_path / "in" / "*", "--output_dir", out, "--window", "4",
            "--spill_buffer_mb", "0.2"]
    env = {**os.environ, "TMPDIR": str(temp)}
    job = JobProcess(argv, env=env)
    runs = out / "_make_shards" / "runs"
    deadline = time.monotonic() + 120
    while not list(runs.glob("*/shards.json")) and time.monotonic() < deadline:
        time.sleep(0.01)   # shards.json: written by the pipeline, once Beam built it
    job.kill()
    job.wait()
    assert not [n for n in os.listdir(temp) if n.startswith("beam-pipeline-temp")]
    for suffix in ("tmp", "stale"):
        (out / "_make_shards" / f"lease.json.{'ab' * 16}.{suffix}").write_text("{}")
    done = JobProcess(argv, env=env)
    assert done.wait() == 0, done.stderr.read()[-2000:]
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
def test_sigterm_stops_a_run_and_its_worker_processes_like_ctrl_c(day1, tmp_path):
    workers = ["--all_cores", "--direct_num_workers", "2",
               "--direct_running_mode", "multi_processing"]
    out = tmp_path / "out"
    shutil.copytree(day1 / "out", out)
    before = dataset_bytes(out)
    job = JobProcess(["--input", day1 / "R" / "day1" / "*.tfrecord", "--output_dir", out,
                      *overriding(FLAGS, "--stride", "3"), "--overwrite", *workers])
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
