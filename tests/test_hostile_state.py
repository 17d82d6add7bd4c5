"""The job's state files are data, OS errors are one line, and a run without a window
commits nothing: a hand-edited or broken lease, dataset.json or run.json, a full disk, a
file size limit or a path under a file each end in one line naming the file and what to
do (or are handled by the rule docs/guarantees.md writes down), never in a traceback, and
the dataset already in the directory stays byte for byte what it was."""
import contextlib
import json
import os
import resource
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from typing import Iterator

import numpy as np
import pytest
from helpers import assert_verified, job_line, overriding, read_dataset_json, run_job
from input_files import random_videos, write_videos
from job_process import JobProcess

from beam_jobs import make_shards, outdir
from beam_jobs.job import job_states
from beam_jobs.job.errors import Refused
from beam_jobs.outdir import lease
from beam_jobs.outdir.holder import Holder, Job, lost_marker, may_still_write

PROG = "python -m beam_jobs.make_shards: error:"
FLAGS = ["--window", "5", "--stride", "3"]


@pytest.fixture(scope="module")
def inputs(tmp_path_factory):
    """A small input, a dataset made of it, and a bigger input (windows of about 700 KB)."""
    root = tmp_path_factory.mktemp("state")
    videos = random_videos(np.random.default_rng(0), 4)
    write_videos(str(root / "small"), videos, files=2)
    write_videos(str(root / "big"), random_videos(np.random.default_rng(1), 8,
                                                  lengths=(300, 400), dim=64), files=2)
    run_job(str(root / "small" / "*"), root / "dataset", *FLAGS)
    return {"small": str(root / "small" / "*"), "big": str(root / "big" / "*"),
            "dataset": root / "dataset", "longest": max(len(f) for f, _ in videos)}


@pytest.fixture
def old(tmp_path, inputs):
    """A copy of the committed dataset in tmp_path/out."""
    out = tmp_path / "out"
    shutil.copytree(inputs["dataset"], out)
    return out


def _tree(directory) -> dict:
    """Every file under `directory` and its bytes."""
    files = {}
    for root, _, names in os.walk(directory):
        for name in names:
            with open(os.path.join(root, name), "rb") as f:
                files[os.path.relpath(os.path.join(root, name), directory)] = f.read()
    return files


def _job(input_glob, out, *extra) -> list[str]:
    return ["--input", input_glob, "--output_dir", str(out), *overriding(FLAGS, *extra)]


# --- the lease -------------------------------------------------------------------------

def _lease(**changes) -> bytes:
    """A lease of a live process on this host (the test's), with `changes`."""
    fields = {"run_id": "0123456789ab", "host": socket.gethostname(), "pid": os.getpid(),
              "started": time.time(), "expires": time.time() + 600, "job": None}
    return json.dumps({**fields, **changes}).encode()


@pytest.mark.parametrize("content", [
    _lease(pid="1"),                 # was a TypeError (os.kill)
    _lease(started=1e300),           # was an OverflowError (time.localtime)
    _lease(pid=0),                   # os.kill(0, 0) signals the group: never "alive"
    _lease(expires=None),            # a local lease that would never expire
    _lease(extra="field"),
    _lease(job=0),                   # a job's lease never expires: only a string names one
    b"[]", b"", b"\xff"],           # was taken for stale and deleted
    ids=["pid string", "started 1e300", "pid 0", "expires null", "extra field", "job 0",
         "a list", "empty", "not utf-8"])
def test_a_lease_this_job_cannot_read_is_refused_in_one_line(old, inputs, capsys, content):
    path = old / "_make_shards" / "lease.json"
    path.parent.mkdir()
    path.write_bytes(content)
    before = _tree(old)
    for extra in ([], ["--overwrite"]):
        line = job_line(capsys, *_job(inputs["small"], old, *extra))
        assert f"{path} is not a lease this job can read (" in line
        assert line.endswith(f"if no run is writing {old}, delete it")
        assert _tree(old) == before


def test_a_lease_deleted_as_its_refusal_says_lets_the_next_run_commit(old, inputs):
    path = old / "_make_shards" / "lease.json"
    path.parent.mkdir()
    path.write_bytes(b"")
    with pytest.raises(Refused, match="delete it"):
        make_shards.run(_job(inputs["small"], old))
    path.unlink()
    run_job(inputs["small"], old, *FLAGS, "--overwrite")   # as it says


@contextlib.contextmanager
def _zombie() -> Iterator[int]:
    """The pid of a process of this host that has exited and is not reaped yet (a
    zombie, as a run killed with -9 is until its parent waits for it), the leader of a
    process group of its own; reaped after the block."""
    child = subprocess.Popen(["true"], process_group=0)
    os.waitid(os.P_PID, child.pid, os.WEXITED | os.WNOWAIT)   # exited, still there
    try:
        yield child.pid
    finally:
        child.wait()


def test_a_lease_whose_process_is_a_zombie_is_taken_over(old, inputs):
    # A run killed with -9 stays a zombie until its parent reaps it, and a large one
    # takes a while to tear its memory down: either way it writes nothing more. Its
    # lease, not yet expired, was taken for a live run's, and the rerun refused.
    path = old / "_make_shards" / "lease.json"
    path.parent.mkdir()
    with _zombie() as pid:
        path.write_bytes(_lease(pid=pid))
        run_job(inputs["small"], old, *FLAGS, "--overwrite")
    assert_verified(old)
    assert not path.exists()


def test_a_lost_leases_marker_whose_processes_are_zombies_names_no_writer():
    # The marker of a run that lost its lease names its process and its process group
    # (its workers'), killed with it by a kill -9 of the group: zombies write nothing.
    with _zombie() as pid:
        marker = lost_marker(Holder("0123456789ab", socket.gethostname(), pid,
                                    time.time(), time.time() + 600))
        assert json.loads(marker)["group"] == pid
        assert not may_still_write(marker)
    assert may_still_write(lost_marker(Holder("0123456789ab", socket.gethostname(),
                                              os.getpid(), time.time(), time.time())))


def _in_child(code: str, limit_bytes: int) -> subprocess.CompletedProcess:
    """Run Python `code` in a child whose files cannot grow past `limit_bytes`: a write
    past it fails with EFBIG (SIGXFSZ, which would kill it, ignored), a real OS error
    that needs no root and no special file system."""
    def limit():
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit_bytes, limit_bytes))

    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          preexec_fn=limit, stdin=subprocess.DEVNULL)


def test_a_lease_is_seen_whole_or_not_at_all(tmp_path):
    # A lease whose write fails (here at the first byte) never appears: before, the file
    # was created empty, then written, so another run could read it empty.
    path = tmp_path / "_make_shards" / "lease.json"
    child = _in_child(f"from beam_jobs.outdir import lease\n"
                      f"lease.Lease({str(path)!r}, '0123456789ab').acquire()", 0)
    assert "OSError: [Errno 27] File too large" in child.stderr, child.stderr[-2000:]
    assert os.listdir(path.parent) == []
    held = lease.Lease(str(path), "0123456789ab").acquire()   # and then it works
    try:
        assert json.loads(path.read_text())["pid"] == os.getpid()
        assert os.listdir(path.parent) == ["lease.json"]
    finally:
        held.release()


# --- dataset.json and run.json ---------------------------------------------------------

@pytest.mark.parametrize("change", [
    lambda meta: {**meta, "splits": []},
    lambda meta: {**meta, "splits": {"train": 3}, "files": None},
    lambda meta: {**meta, "splits": {"train": {"shards": [3]}}},
    lambda meta: {**meta, "files": "train-00000-of-00001.tfrecord"},
    lambda meta: {**meta, "run_id": 7},
    lambda meta: [meta]],
    ids=["splits a list", "a split a number", "a shard a number", "files a string",
         "run_id a number", "a list"])
def test_a_dataset_json_this_job_cannot_read_is_refused_in_one_line(old, inputs, capsys,
                                                                    change):
    meta = change(read_dataset_json(old))
    (old / "dataset.json").write_text(json.dumps(meta))
    before = _tree(old)
    for extra in ([], ["--overwrite"]):
        line = job_line(capsys, *_job(inputs["small"], old, *extra))
        assert f"{old / 'dataset.json'} is not a dataset.json this job can read (" in line
        assert line.endswith("remove it or choose another --output_dir")
        assert _tree(old) == before


@pytest.mark.slow
def test_a_run_json_naming_a_foreign_temp_dir_never_blocks_nor_reaches_it(old, inputs,
                                                                         tmp_path, caplog):
    outside = tmp_path / "outside"
    (outside / "make_shards-0123456789ab").mkdir(parents=True)   # named like one, no marker
    (outside / "keep.txt").write_text("keep me")
    (outside / "make_shards-0123456789ab" / "keep.txt").write_text("keep me too")
    hostile = {"0123456789ab": str(outside / "make_shards-0123456789ab"),
               "123456789abc": f"{old}/../outside",   # was a ValueError on every rerun
               "23456789abcd": str(outside), "3456789abcde": "/", "456789abcdef": 5,
               "56789abcdef0": ["a list"]}
    for run_id, temp_dir in hostile.items():
        folder = old / "_make_shards" / "runs" / run_id
        (folder / "tmp").mkdir(parents=True)
        (folder / "run.json").write_text(json.dumps({"run_id": run_id, "temp_dir": temp_dir}))
    outside_before = _tree(outside)
    run_job(inputs["small"], old, *FLAGS, "--overwrite")
    assert _tree(outside) == outside_before
    assert not (old / "_make_shards").exists()   # the run folders are gone all the same
    warnings = [r.getMessage() for r in caplog.records if "not its own" in r.getMessage()]
    assert len(warnings) == len(hostile) - 1, warnings   # the marker-less one: no marker


# --- OS errors -------------------------------------------------------------------------

def _assert_one_line_and_unchanged(child, out, before, error: str) -> None:
    assert child.returncode == 1, child.stderr[-3000:]
    assert "Traceback" not in child.stderr, child.stderr[-3000:]
    last = child.stderr.strip().splitlines()[-1]
    assert last.startswith(f"{PROG} {out}: {error}"), last
    assert last.endswith(f"nothing was committed; {out} holds what it held before"), last
    assert _tree(out) == before
    assert_verified(out)


def _job_command(input_glob, out, *extra) -> list[str]:
    return [sys.executable, "-m", "beam_jobs.make_shards", *_job(input_glob, out, *extra)]


@pytest.mark.slow
def test_a_file_size_limit_is_one_line_and_leaves_the_old_dataset(old, inputs):
    # Always available: the lease, run.json and shards.json fit under the limit, the
    # first spilled sorted file of the new windows does not.
    before = _tree(old)
    child = _in_child("import sys; from beam_jobs import make_shards\n"
                      f"sys.argv[1:] = {_job(inputs['big'], old, '--overwrite')!r}\n"
                      "sys.exit(make_shards.main())", 32 * 1024)
    _assert_one_line_and_unchanged(child, old, before, "File too large")


def _mount(*command: str) -> None:
    done = subprocess.run(["mount", *command], capture_output=True, text=True)
    if done.returncode:
        pytest.skip(f"cannot mount a tmpfs here: {done.stderr.strip()}")


@pytest.fixture
def tiny_disk(tmp_path, inputs):
    """A 256 KiB file system (tmpfs; needs root, else the test is skipped) holding a copy
    of the dataset in `out`."""
    disk = tmp_path / "disk"
    disk.mkdir()
    if os.geteuid() != 0 or shutil.which("mount") is None:
        pytest.skip("mounting a tmpfs needs root")
    _mount("-t", "tmpfs", "-o", "size=256k", "tmpfs", str(disk))
    try:
        shutil.copytree(inputs["dataset"], disk / "out")
        yield disk
    finally:
        subprocess.run(["umount", str(disk)], check=True)


@pytest.mark.slow
def test_a_full_disk_is_one_line_and_leaves_the_old_dataset(tiny_disk, inputs):
    out = tiny_disk / "out"
    before = _tree(out)
    child = subprocess.run(_job_command(inputs["big"], out, "--overwrite"),
                           capture_output=True, text=True, stdin=subprocess.DEVNULL)
    _assert_one_line_and_unchanged(child, out, before, "No space left on device")
    assert os.listdir(tiny_disk) == ["out"]


@pytest.mark.slow
def test_a_read_only_file_system_is_one_line(tiny_disk, inputs):
    out = tiny_disk / "out"
    before = _tree(out)
    _mount("-o", "remount,ro", str(tiny_disk))
    child = subprocess.run(_job_command(inputs["small"], out, "--overwrite"),
                           capture_output=True, text=True, stdin=subprocess.DEVNULL)
    assert child.returncode == 1 and "Traceback" not in child.stderr, child.stderr[-3000:]
    last = child.stderr.strip().splitlines()[-1]
    assert last == f"{PROG} {out / '_make_shards'}: Read-only file system; nothing was committed"
    assert _tree(out) == before


def test_an_output_dir_under_a_file_is_one_line(tmp_path, inputs, capsys):
    (tmp_path / "file").write_text("x")
    line = job_line(capsys, *_job(inputs["small"], tmp_path / "file" / "out"), status=1)
    assert line.startswith(f"{PROG} {tmp_path / 'file' / 'out'}: Not a directory"), line
    assert (tmp_path / "file").read_text() == "x"


@pytest.mark.slow
def test_a_commit_that_cannot_write_dataset_json_changes_nothing(old, tmp_path):
    # The commit writes dataset.json into the run folder before it moves anything into
    # the directory: a full disk (here a file size limit) at that write leaves the
    # directory as it was, the old sidecars too.
    before = _tree(old)
    code = f"""
import dataclasses, json
from beam_jobs.commit import finalize
from beam_jobs.core.run_dir import RunDir
from readers import format as data_format
run = RunDir({str(old)!r}, "0123456789ab", "")
dataset = data_format.DatasetSpec.from_json(open({str(old / 'dataset.json')!r}).read())
dataset = dataclasses.replace(dataset, run_id=run.run_id, flags={{"pad": "x" * 100000}})
finalize.commit(run, dataset, ["failures.jsonl", "videos.jsonl"])
"""
    folder = old / "_make_shards" / "runs" / "0123456789ab"
    folder.mkdir(parents=True)
    for name in ("failures.jsonl", "videos.jsonl"):
        (folder / name).write_text("new\n")
    child = _in_child(code, 64 * 1024)
    assert "File too large" in child.stderr, child.stderr[-2000:]
    assert {n: b for n, b in _tree(old).items() if not n.startswith("_make_shards")} == before
    assert sorted(os.listdir(folder)) == ["failures.jsonl", "videos.jsonl"]


# --- a run without a window ------------------------------------------------------------

@pytest.mark.slow
def test_a_run_without_a_window_fails_in_one_line_and_commits_nothing(old, inputs, tmp_path,
                                                                     capsys):
    before = _tree(old)
    line = job_line(capsys, *_job(inputs["small"], old, "--overwrite", "--window", "2000"),
                    status=1)
    assert (f"no window to commit: every video is shorter than --window 2000 (the longest "
            f"has {inputs['longest']} frames)") in line
    assert {n: b for n, b in _tree(old).items() if not n.startswith("_make_shards")} == before
    assert_verified(old)
    job_line(capsys, *_job(inputs["small"], tmp_path / "new", "--window", "2000"), status=1)
    assert not (tmp_path / "new" / "dataset.json").exists()


@pytest.mark.slow
def test_a_run_whose_every_video_failed_commits_nothing(tmp_path, capsys):
    # three videos of one id: each fails as a duplicate
    write_videos(str(tmp_path / "bad"), random_videos(np.random.default_rng(2), 3), files=1,
                 video_id="same")
    line = job_line(capsys, *_job(str(tmp_path / "bad" / "*"), tmp_path / "out",
                                 "--id_feature", "vid", "--max_failure_fraction", "1"), status=1)
    assert "no window to commit: no video was read (3 failed); see " in line
    assert not (tmp_path / "out" / "dataset.json").exists()


@contextlib.contextmanager
def _silent_endpoint() -> Iterator[int]:
    """A port on this machine that takes connections and never answers; its number."""
    server, held = socket.socket(), []
    server.bind(("127.0.0.1", 0))
    server.listen(64)

    def accept():
        while True:
            try:
                held.append(server.accept()[0])
            except OSError:   # closed: the block ended
                return
    threading.Thread(target=accept, daemon=True).start()
    try:
        yield server.getsockname()[1]
    finally:
        server.close()
        for connection in held:
            connection.close()


@pytest.mark.slow
def test_a_dataflow_jobs_lease_whose_runner_never_answers_is_one_line(tmp_path, inputs):
    """A lease names a Dataflow job; Dataflow's endpoint takes the question and never
    answers (no network). The run asks within a deadline, then refuses naming
    --break_lease, or with it takes over: one line either way, no retry's warning or
    traceback before it. (The two runs wait out the deadline side by side.)"""
    outs, runs = {}, {}
    with _silent_endpoint() as port:
        for break_lease in (False, True):
            out = outs[break_lease] = tmp_path / f"out-{break_lease}"
            shutil.copytree(inputs["dataset"], out)
            first = outdir.prepare(outdir.ClaimRequest(str(out), overwrite=True, job=Job(
                "DataflowRunner", "make-shards-1", project="test-project",
                region="us-central1")))
            first.lease.record_job_id("2026-12-04_00_00_00-1")
            runs[break_lease] = JobProcess(
                ["--input", inputs["small"], "--output_dir", out, *FLAGS, "--overwrite",
                 "--dataflow_endpoint", f"http://localhost:{port}", "--no_auth",
                 *(["--break_lease"] if break_lease else [])],
                env={**os.environ, "GCE_METADATA_HOST": f"127.0.0.1:{port}",
                     "GCE_METADATA_IP": f"127.0.0.1:{port}"})
        statuses = {lease: run.wait(300) for lease, run in runs.items()}
    before = read_dataset_json(inputs["dataset"])["run_id"]
    for break_lease, run in runs.items():
        said = run.stderr.read()
        assert "Traceback" not in said and "ERROR" not in said, said
        told = [line for line in said.splitlines() if line.startswith(("WARNING", PROG))]
        assert len(told) == 1, said
        assert f"Dataflow did not answer in {job_states.ASK_TIMEOUT_SECONDS:.0f} s" in told[0]
        out, status = outs[break_lease], statuses[break_lease]
        if break_lease:
            assert status == 0 and told[0].startswith("WARNING"), said
            assert "breaking the lease" in told[0]
            assert read_dataset_json(out)["run_id"] != before
        else:
            assert status == 2 and told[0].startswith(PROG) and "--break_lease" in told[0], said
            assert read_dataset_json(out)["run_id"] == before
        assert_verified(out)
