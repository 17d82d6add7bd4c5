"""The commit protocol: with --overwrite, the old dataset stays whole, byte for byte, until
the new run commits (one write of dataset.json); nothing undoes a commit; what a run
leaves half-cleaned never blocks the directory; Ctrl-C is one line; a job on a
distributed runner holds the directory by a lease that names it."""
import dataclasses
import json
import os
import shutil
import signal
import socket
import subprocess
import time

import numpy as np
import pytest
from helpers import (
    assert_verified,
    dataset_bytes,
    job_line,
    plain_name,
    plain_names,
    read_dataset_json,
    run_job,
    start_job,
)
from input_files import latent_example, random_videos, write_records, write_videos

from beam_jobs import make_shards, outdir
from beam_jobs.job.errors import Failed, Refused
from beam_jobs.outdir import lease
from beam_jobs.outdir.holder import Holder, Job, holder_of

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
FLAGS = ["--window", "8", "--stride", "4", "--num_shards", "3"]


def _job(input_glob, out, *extra):
    return ["--input", input_glob, "--output_dir", str(out), *FLAGS, *extra]


@pytest.fixture(scope="module")
def inputs(tmp_path_factory):
    """A committed dataset, and a bigger input for a new run that takes a while (so that
    it can be stopped half-way)."""
    root = tmp_path_factory.mktemp("commit")
    rng = np.random.default_rng(1234)
    write_videos(str(root / "small"), random_videos(rng, 6), files=2)
    run_job(str(root / "small" / "*"), root / "dataset", *FLAGS)
    write_videos(str(root / "big"), random_videos(rng, 40, lengths=(300, 400), dim=64),
                 files=8)
    return root / "dataset", str(root / "big" / "*")


@pytest.fixture
def old(tmp_path, inputs):
    """A copy of the committed dataset in tmp_path/out, its bytes, and the big input."""
    dataset, big = inputs
    out = tmp_path / "out"
    shutil.copytree(dataset, out)
    return out, dataset_bytes(out), big


def _assert_unchanged(out, before):
    assert dataset_bytes(out) == before
    assert_verified(out)


def test_a_refused_run_leaves_the_olddataset_bytes(old, capsys):
    out, before, big = old
    for extra in (["--window", "0"],                 # a bad flag: refused before any work
                  ["--sequence_feature", "nope"]):   # an input that cannot be probed
        line = job_line(capsys, "--input", big, "--output_dir", out, "--overwrite", *FLAGS,
                        *extra)
        assert line.startswith("python -m beam_jobs.make_shards: error:")
        _assert_unchanged(out, before)
        assert not os.path.exists(out / "_make_shards" / "lease.json")


@pytest.mark.slow
def test_a_run_over_the_failure_threshold_leaves_the_olddataset_bytes(old, tmp_path, rng):
    out, before, big = old
    good = [latent_example(f, r) for f, r in random_videos(rng, 4)]
    write_records(str(tmp_path / "bad" / "a.tfrecord"), good + [b"not an example"] * 4)
    with pytest.raises(Failed, match="videos failed"):
        make_shards.run(["--input", str(tmp_path / "bad" / "*"), "--output_dir", str(out),
                         "--overwrite", *FLAGS])
    _assert_unchanged(out, before)
    # the rerun commits, and clears the failed run's folder and the old dataset
    run_job(big, out, *FLAGS, "--overwrite")
    assert not set(read_dataset_json(out)["files"]) & {n for n in before if "tfrecord" in n}
    assert os.listdir(out) and not os.path.exists(out / "_make_shards")
    assert plain_names(os.listdir(out)) == plain_names(read_dataset_json(out)["files"] +
                                                       ["dataset.json"])


@pytest.mark.slow
@pytest.mark.parametrize("stop", ["kill -9", "Ctrl-C"])
def test_a_stopped_overwrite_leaves_the_old_dataset_and_the_rerun_commits(old, stop):
    out, before, big = old
    command = _job(big, out, "--overwrite", "--spill_buffer_mb", "0.2")
    process = start_job(command, out)
    os.killpg(process.pid, signal.SIGKILL if stop == "kill -9" else signal.SIGINT)
    code = process.wait()
    stderr = process.stderr.read()
    if stop == "Ctrl-C":
        assert code == 130, stderr[-2000:]
        assert "Traceback" not in stderr, stderr[-3000:]
        last = stderr.strip().splitlines()[-1]
        assert last.startswith("python -m beam_jobs.make_shards: interrupted: nothing was "
                               "committed"), last
        assert not os.path.exists(out / "_make_shards" / "lease.json")
    _assert_unchanged(out, before)
    run_job(big, out, *FLAGS, "--overwrite", "--spill_buffer_mb", "0.2")   # the rerun
    assert plain_names(os.listdir(out)) == plain_names(read_dataset_json(out)["files"] +
                                                       ["dataset.json"])


@pytest.mark.slow
def test_a_failed_cleanup_after_the_commit_leaves_the_new_dataset_whole(old):
    out, before, big = old
    process = start_job(_job(big, out, "--overwrite", "--spill_buffer_mb", "0.2"), out)
    # An old file that the cleanup after the commit cannot delete: a directory now.
    (index,) = [n for n in before if n.startswith("train-00000") and n.endswith(".index")]
    os.remove(out / index)
    os.makedirs(out / index / "in the way")
    code, stderr = process.wait(), process.stderr.read()
    assert code == 0, stderr[-2000:]
    assert "Traceback" not in stderr
    (warning,) = [line for line in stderr.splitlines() if "cleaning up after it failed" in line]
    assert "WARNING" in warning and "is committed" in warning
    meta = read_dataset_json(out)
    committed = {n: b for n, b in dataset_bytes(out).items() if n in meta["files"]}
    assert_verified(out)
    # the next run finishes the cleanup, once the directory in the way is gone; the
    # committed dataset is untouched
    os.rmdir(out / index / "in the way")
    os.rmdir(out / index)
    with pytest.raises(Refused, match="already holds a dataset"):
        make_shards.run(["--input", big, "--output_dir", str(out), *FLAGS])
    assert dataset_bytes(out) == {**committed, "dataset.json": dataset_bytes(out)["dataset.json"]}
    assert read_dataset_json(out) == meta
    assert not os.path.exists(out / "_make_shards")
    assert_verified(out)


@pytest.mark.slow
def test_a_half_cleaned_run_folder_never_blocks_the_directory(old):
    out, before, big = old
    runs = out / "_make_shards" / "runs"
    # a cleanup that stopped half-way: run.json gone (it goes last), a listed shard and
    # temp data left; and a folder with nothing but temp data
    half = runs / "0123456789ab"
    (half / "tmp" / "spill").mkdir(parents=True)
    (half / "tmp" / "spill" / "train-0.sorted").write_bytes(b"spilled")
    extra = "train-00000-of-00003-0123456789ab.tfrecord"
    (half / "shards.json").write_text(json.dumps([extra]))
    (out / extra).write_bytes(b"half written")
    (runs / "ba9876543210" / "tmp").mkdir(parents=True)
    run_job(big, out, *FLAGS, "--overwrite")
    assert not os.path.exists(out / extra) and not os.path.exists(out / "_make_shards")
    assert plain_names(os.listdir(out)) == plain_names(read_dataset_json(out)["files"] +
                                                       ["dataset.json"])


def test_a_distributed_jobs_lease_names_the_job_and_never_expires(tmp_path):
    out = str(tmp_path / "out")
    job = Job("DataflowRunner", "make-shards-20261201-1", project="p", region="r")
    claim = outdir.prepare(outdir.ClaimRequest(out, job=job))
    path = os.path.join(out, "_make_shards", "lease.json")
    claim.lease.record_job_id("2026-12-01_01_02_03-123")
    with open(path) as f:
        held = json.load(f)
    assert held["job"] == {"runner": "DataflowRunner", "name": "make-shards-20261201-1",
                           "id": "2026-12-01_01_02_03-123", "endpoint": None,
                           "project": "p", "region": "r"}
    assert held["expires"] is None and claim.run.releases_lease   # the pipeline releases it
    # its launcher may be gone (a template, a scheduler): the lease holds all the same,
    # and a run that cannot ask the runner about the job is refused, naming the way out
    held["pid"], held["started"] = 2 ** 22 + 1, time.time() - 10 ** 6
    with open(path, "w") as f:
        json.dump(held, f)
    with pytest.raises(outdir.OutputDirError) as refused:
        outdir.prepare(outdir.ClaimRequest(out))
    message = str(refused.value)
    assert "job 2026-12-01_01_02_03-123 on DataflowRunner at p/r" in message
    assert "no runner to ask" in message and "pass --break_lease" in message
    assert "\n" not in message
    # what the message says to do
    second = outdir.prepare(outdir.ClaimRequest(out, break_lease=True))
    assert holder_of(open(path, "rb").read()) == second.run.run_id
    outdir.abandon(second.run)
    outdir.release(second)


@pytest.mark.slow
def test_detach_submits_a_job_that_commits_cleans_up_and_releases_on_its_own(tmp_path, rng,
                                                                            capsys):
    write_videos(str(tmp_path / "in"), random_videos(rng, 2), files=1)
    argv = ["--input", str(tmp_path / "in" / "*"), "--output_dir", "gs://test-bucket/out",
            "--window", "5", "--detach"]
    assert "--detach" in job_line(capsys, *argv)   # a local run is this process
    cwd = os.getcwd()
    os.chdir(ROOT)
    try:
        result = make_shards.run([
            *argv, "--runner", "DataflowRunner", "--dry_run=True", "--project",
            "test-project", "--region", "us-central1", "--temp_location",
            "gs://test-bucket/tmp", "--setup_file", "./setup.py"])
    finally:
        os.chdir(cwd)
    names = [t.unique_name for t in result.job.proto_pipeline.components.transforms.values()]
    assert {"Finalize/Commit", "Finalize/CleanUp", "Finalize/ReleaseLease"} <= set(names)


def test_the_heartbeat_survives_a_failed_renewal(tmp_path, monkeypatch, caplog):
    monkeypatch.setattr(lease, "HEARTBEAT_SECONDS", 0.05)
    path = str(tmp_path / "lease.json")
    held = lease.Lease(path, "r1").acquire()
    # Reading the lease fails for a while (a link to a directory: an OSError, as a
    # network error would be), then the same file is back. Each swap is one rename.
    aside, link = str(tmp_path / "aside"), str(tmp_path / "link")
    os.link(path, aside)
    os.symlink(tmp_path, link)
    os.replace(link, path)
    deadline = time.monotonic() + 60
    while "could not renew" not in caplog.text and time.monotonic() < deadline:
        time.sleep(0.01)
    os.replace(aside, path)
    expires = json.load(open(path))["expires"]
    while json.load(open(path))["expires"] == expires and time.monotonic() < deadline:
        time.sleep(0.01)
    assert "could not renew" in caplog.text and not held.lost
    assert json.load(open(path))["expires"] > expires
    held.release()
    assert not os.path.exists(path)


@pytest.mark.slow
def test_every_step_may_run_again_after_its_side_effects_as_a_retried_bundle_does(
        tmp_path, rng):
    """--direct_runner_bundle_repeat 1: FnApiRunner runs every bundle once more before
    its real run, side effects and all (Beam's own way to test that a step is safe to
    retry, as Dataflow retries a failed bundle). The commit, the cleanup after it and
    the lease's release are stages of their own, and each may run twice: the dataset is
    the one a plain run commits, and an append on top of it commits too."""
    write_videos(str(tmp_path / "in"), random_videos(rng, 12), files=3)
    glob, twice = str(tmp_path / "in" / "*"), ["--direct_runner_bundle_repeat", "1"]
    run_job(glob, tmp_path / "plain", *FLAGS)
    run_job(glob, tmp_path / "twice", *FLAGS, *twice)
    plain, repeated = dataset_bytes(tmp_path / "plain"), dataset_bytes(tmp_path / "twice")
    assert plain_names(plain) == plain_names(repeated)
    assert ({plain_name(n): b for n, b in plain.items() if n.endswith(".tfrecord")}
            == {plain_name(n): b for n, b in repeated.items() if n.endswith(".tfrecord")})
    write_videos(str(tmp_path / "more"), random_videos(rng, 4), files=1)
    os.rename(tmp_path / "more" / "lat-0.tfrecord", tmp_path / "in" / "new.tfrecord")
    run_job(glob, tmp_path / "twice", *FLAGS, *twice, "--append")
    meta = read_dataset_json(tmp_path / "twice")
    assert [g["videos"] for g in meta["generations"]] == [12, 4]
    assert set(os.listdir(tmp_path / "twice")) == {*meta["files"], "dataset.json"}


@pytest.mark.parametrize("state, outcome", [
    ("JOB_STATE_RUNNING", "reports RUNNING; wait for it to end, or cancel it"),
    ("JOB_STATE_CANCELLING", "reports CANCELLING; wait for it to end, or cancel it"),
    ("JOB_STATE_FAILED", None), ("JOB_STATE_CANCELLED", None), ("JOB_STATE_DONE", None),
    ("denied", "its runner cannot be asked about it (Dataflow did not answer: 403 no "
               "access to project p); if that job no longer runs, pass --break_lease")])
def test_a_later_run_asks_dataflow_about_the_job_that_holds_the_lease(tmp_path, monkeypatch,
                                                                      state, outcome):
    """Dataflow's API client as Beam builds it; only its network call is replaced."""
    from google.api_core import exceptions
    from google.cloud import dataflow_v1beta3 as dataflow
    from google.cloud.dataflow_v1beta3.services.jobs_v1_beta3.client import JobsV1Beta3Client

    from beam_jobs.job import job_states

    asked = []

    def get_job(self, request, **kwargs):
        asked.append((request.project_id, request.location, request.job_id))
        if state == "denied":
            raise exceptions.PermissionDenied("no access to project p")
        return dataflow.Job(id=request.job_id, current_state=getattr(dataflow.JobState, state))

    monkeypatch.setattr(JobsV1Beta3Client, "get_job", get_job)
    out = str(tmp_path / "out")
    first = outdir.prepare(outdir.ClaimRequest(out, job=Job(
        "DataflowRunner", "make-shards-1", project="p", region="europe-west4")))
    first.lease.record_job_id("2026-12-01_01_02_03-99")
    ask = job_states.asker(["--no_auth"])   # this run's own credentials options
    if outcome is not None:
        with pytest.raises(outdir.OutputDirError) as refused:
            outdir.prepare(outdir.ClaimRequest(out, ask=ask))
        assert outcome in str(refused.value)
        assert "job 2026-12-01_01_02_03-99 on DataflowRunner at p/europe-west4" in str(
            refused.value)
    else:
        # a stopped job's lease is taken over
        second = outdir.prepare(outdir.ClaimRequest(out, ask=ask))
        outdir.abandon(second.run)
        outdir.release(second)
    assert asked == [("p", "europe-west4", "2026-12-01_01_02_03-99")]


def test_break_lease_with_nothing_to_break_says_so(tmp_path, caplog):
    """--break_lease breaks a distributed job's lease; where there is none (a free
    lease, or a local run's), the flag is not silent: a warning line, or the refusal
    says what takes a local run's lease over."""
    out = str(tmp_path / "out")
    first = outdir.prepare(outdir.ClaimRequest(out, break_lease=True))
    assert "--break_lease: no lease of a job on a distributed runner to break" in caplog.text
    with pytest.raises(outdir.OutputDirError) as refused:   # a live local run holds it
        outdir.prepare(outdir.ClaimRequest(out, break_lease=True))
    message = str(refused.value)
    assert f"pid {os.getpid()}" in message and "breaks only a distributed job's lease" in message
    assert "\n" not in message
    outdir.abandon(first.run)
    outdir.release(first)


def test_a_lost_lease_marker_goes_once_its_process_and_group_are_gone(tmp_path):
    """A marker names the run that lost its lease as its lease did, and its process
    group: the next run removes it once the process and every process of the group are
    gone, and keeps one whose group still lives (its workers may write) or that names
    no process (a marker from before they did)."""
    gone = subprocess.Popen(["true"])
    gone.wait()
    runs = tmp_path / "out" / "_make_shards" / "runs"
    markers = {"aaaaaaaaaaaa": os.getpgid(0),   # this test's own group: alive
               "bbbbbbbbbbbb": None, "cccccccccccc": gone.pid}
    for run_id, group in markers.items():
        holder = Holder(run_id, socket.gethostname(), gone.pid, time.time() - 300,
                              time.time() - 100)
        (runs / run_id).mkdir(parents=True)
        (runs / run_id / "lost_lease.json").write_text(
            json.dumps({**dataclasses.asdict(holder), "group": group}))
    (runs / "dddddddddddd").mkdir()
    (runs / "dddddddddddd" / "lost_lease.json").write_text('{"run_id": "dddddddddddd"}')
    claim = outdir.prepare(outdir.ClaimRequest(str(tmp_path / "out")))
    outdir.abandon(claim.run)
    outdir.release(claim)
    assert sorted(os.listdir(runs)) == ["aaaaaaaaaaaa", "dddddddddddd"]
    assert json.loads((runs / "aaaaaaaaaaaa" / "lost_lease.json").read_text())["group"] == \
        os.getpgid(0)
