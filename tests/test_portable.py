"""The job on a real distributed Beam runner: PortableRunner with Beam's local job service
and external worker pools, each a process of its own (portable_services.py), as a user
starts them (docs/dataflow.md). One pool's workers cannot import PyAV.

What a distributed run must do there: commit the bytes FnApiRunner commits, on its own
once detached; hold the directory with a lease naming its job that later runs ask the
runner about; and on Ctrl-C give the lease back only when the runner confirms the job
stopped."""
from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import time
from typing import Iterator

import grpc
import numpy as np
import psutil
import pytest
from apache_beam.portability.api import beam_job_api_pb2, beam_job_api_pb2_grpc
from helpers import (
    assert_documented_exit,
    assert_verified,
    dataset_bytes,
    read_dataset_json,
    run_job,
    same_dataset_files,
)
from input_files import (
    random_videos,
    solid_frames,
    write_frame_folder,
    write_manifest,
    write_video,
    write_videos,
)
from job_process import JobProcess
from portable_services import job_service, options, worker_pool

from beam_jobs import make_shards
from beam_jobs.job.errors import Refused

pytestmark = pytest.mark.slow   # processes of their own, and runs of ~10 s

FLAGS = ["--window", "10", "--stride", "3", "--splits", "train=0.7,test=0.3",
         "--num_shards", "3", "--seed", "7"]
NO_AV = "import av fails on this worker: tests/test_portable.py blocks it"


@pytest.fixture(scope="module")
def portable(tmp_path_factory):
    """The job endpoint, a worker pool's, and one whose workers cannot import av."""
    root = tmp_path_factory.mktemp("portable")
    blocked = root / "no_av" / "av"
    blocked.mkdir(parents=True)
    (blocked / "__init__.py").write_text(
        f"raise ModuleNotFoundError({NO_AV!r}, name='av')\n")
    no_av = dict(os.environ, PYTHONPATH=os.pathsep.join(
        [str(root / "no_av"), *filter(None, [os.environ.get("PYTHONPATH")])]))
    with job_service(str(root)) as jobs, worker_pool(str(root), "pool") as pool, \
            worker_pool(str(root), "pool_no_av", no_av) as pool_no_av:
        yield {"jobs": jobs, "pool": pool, "no_av": pool_no_av, "root": root}


def _state(endpoint: str, job_id: str) -> str:
    with grpc.insecure_channel(endpoint) as channel:
        state = beam_job_api_pb2_grpc.JobServiceStub(channel).GetState(
            beam_job_api_pb2.GetJobStateRequest(job_id=job_id), timeout=10).state
    return beam_job_api_pb2.JobState.Enum.Name(state)


def _wait_for(endpoint: str, job_id: str, states, timeout: float = 300) -> str:
    deadline = time.monotonic() + timeout
    while (state := _state(endpoint, job_id)) not in states:
        assert time.monotonic() < deadline, f"job {job_id} still {state}"
        time.sleep(0.2)
    return state


def _lease(out) -> dict:
    with open(os.path.join(out, "_make_shards", "lease.json")) as f:
        return json.load(f)


def _job_of_lease(out, timeout: float = 120) -> dict:
    """The job named by the lease in `out`, once the launcher recorded its id."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            job = _lease(out)["job"]
        except FileNotFoundError:   # not yet taken
            job = None
        if job and job.get("id"):
            return job
        assert time.monotonic() < deadline, "the lease never named its job's id"
        time.sleep(0.1)


@pytest.fixture
def latents(tmp_path, rng):
    write_videos(str(tmp_path / "in"), random_videos(rng, 12, lengths=(8, 50)), files=4)
    return str(tmp_path / "in" / "*.tfrecord")


def test_a_detached_latent_run_commits_alone_on_workers_without_pyav(portable, tmp_path,
                                                                     latents):
    run_job(latents, tmp_path / "fnapi", *FLAGS, "--shuffle", "group")
    out, temp = tmp_path / "portable", tmp_path / "tmp"
    temp.mkdir()
    launcher = JobProcess(["--input", latents, "--output_dir", out, *FLAGS, "--detach",
                           *options(portable["jobs"], portable["no_av"])],
                          env={**os.environ, "TMPDIR": str(temp)})
    assert launcher.wait(300) == 0, launcher.stderr.read()
    said = launcher.stderr.read()
    found = re.search(r"submitted job (\S+) on PortableRunner at (\S+): it commits", said)
    assert found and found[2] == portable["jobs"], said
    job = found[1]   # the launcher is gone; the job runs on
    assert os.listdir(temp) == []   # what Beam's stager wrote for the submission went
    assert _wait_for(portable["jobs"], job, {"DONE", "FAILED", "CANCELLED"}) == "DONE"
    assert not os.path.exists(out / "_make_shards")   # committed, cleaned up, released
    assert_verified(out)
    same_dataset_files(tmp_path / "fnapi", out)
    assert read_dataset_json(out)["flags"]["shuffle"] == "group"


def test_a_pixel_manifest_run_commits_what_fnapirunner_commits(portable, tmp_path, rng):
    rows = []
    for i in range(6):
        length = int(rng.integers(12, 30))
        write_frame_folder(tmp_path / f"v{i}", list(rng.integers(
            0, 255, (length, 24, 32, 3), np.uint8)))
        rows.append({"video_id": f"v{i}", "frames": f"v{i}",
                     "labels": [i + t / 100 for t in range(length)], "metadata": [i, 2 * i]})
    manifest = write_manifest(tmp_path / "m.jsonl", rows)
    flags = [*FLAGS, "--frame_encoding", "png", "--tail", "pad"]
    run_job(manifest, tmp_path / "fnapi", *flags, "--shuffle", "group")
    run_job(manifest, tmp_path / "portable", *flags,
            *options(portable["jobs"], portable["pool"]))
    same_dataset_files(tmp_path / "fnapi", tmp_path / "portable")
    assert not os.path.exists(tmp_path / "portable" / "_make_shards")


def test_a_failed_detached_jobs_lease_is_taken_over_once_the_runner_says_so(
        portable, tmp_path, latents, caplog):
    """A job whose workers cannot decode videos (no av) fails after its launcher left;
    the next run asks the job service, which says FAILED, and takes over."""
    videos = tmp_path / "videos"
    videos.mkdir()
    for i in range(2):
        write_video(videos / f"v{i}.mp4", solid_frames(12))
    out = tmp_path / "out"
    launcher = JobProcess(["--input", videos / "*.mp4", "--output_dir", out, "--window", "4",
                           "--detach", *options(portable["jobs"], portable["no_av"])])
    assert launcher.wait(300) == 0, launcher.stderr.read()
    job = _job_of_lease(out)
    assert job["runner"] == "PortableRunner" and job["endpoint"] == portable["jobs"]
    assert _wait_for(portable["jobs"], job["id"], {"DONE", "FAILED"}) == "FAILED"
    failed_run = _lease(out)["run_id"]
    assert os.path.isdir(out / "_make_shards" / "runs" / failed_run)
    # the next run, distributed too: its pipeline deletes the failed job's leftovers
    run_job(latents, out, *FLAGS, *options(portable["jobs"], portable["no_av"]))
    assert f"{job['id']} on PortableRunner at {portable['jobs']} is FAILED: taking over" \
        in caplog.text
    assert read_dataset_json(out)["run_id"] != failed_run
    assert not os.path.exists(out / "_make_shards")   # the failed job's leftovers went


@contextlib.contextmanager
def _interrupted_while_frozen(portable, latents, out, *flags) -> Iterator[tuple[dict, str]]:
    """A run on the pool whose workers cannot import av, its workers frozen (SIGSTOP) once
    its job runs, so that it cannot end before the checks, then Ctrl-C in its launcher,
    which exits 130: (the job, the launcher's stderr) for the block; after it, the
    workers go on."""
    launcher = JobProcess(["--input", latents, "--output_dir", out, *FLAGS, *flags,
                           *options(portable["jobs"], portable["no_av"])])
    job = _job_of_lease(out)
    pool_group = _pool_group(portable["root"], "pool_no_av")
    os.killpg(pool_group, signal.SIGSTOP)
    try:
        assert _wait_for(portable["jobs"], job["id"], {"RUNNING", "DONE", "FAILED"}) == \
            "RUNNING"
        launcher.send_signal(signal.SIGINT)
        assert launcher.wait(300) == 130
        yield job, launcher.stderr.read()
    finally:
        os.killpg(pool_group, signal.SIGCONT)


def test_ctrl_c_keeps_the_lease_of_a_job_the_runner_does_not_confirm_stopped(
        portable, tmp_path, latents, capsys, caplog):
    """Beam's local job service answers a cancel with CANCELLED at once and lets the job
    run on: the launcher says it cannot confirm, and keeps the lease naming the job."""
    out = tmp_path / "out"
    with _interrupted_while_frozen(portable, latents, out) as (job, said):
        assert "asking PortableRunner to cancel" in said
        last = said.strip().splitlines()[-1]
        assert "interrupted: could not confirm that job" in last and "CANCELLED" in last
        assert "its lease stays with it" in last
        assert_documented_exit(130, last)
        assert _lease(out)["job"]["id"] == job["id"]
        with pytest.raises(Refused) as refused:
            make_shards.run(["--input", latents, "--output_dir", str(out), *FLAGS])
        message = str(refused.value)
        assert "reports it CANCELLED" in message and "--break_lease" in message
        assert "\n" not in message
        # a person who knows the job is gone breaks the lease; the job cannot commit over it
        run_job(latents, out, *FLAGS, "--break_lease")
        assert "--break_lease: breaking the lease" in caplog.text
        ours = read_dataset_json(out)["run_id"]
    assert _wait_for(portable["jobs"], job["id"], {"DONE", "FAILED"}) == "FAILED"
    assert read_dataset_json(out)["run_id"] == ours
    assert_verified(out)


def test_ctrl_c_fences_off_the_commit_of_a_job_the_runner_lets_run_on(
        portable, tmp_path, latents):
    """Ctrl-C means "commit nothing", also where the runner says CANCELLED and lets the
    job run on (Beam's local job service): the launcher fences the job's commit off and
    says so; the job, continued, commits nothing, and the dataset before stays as it
    was. The next run proceeds as after any run that did not commit."""
    out = tmp_path / "out"
    run_job(latents, out, *FLAGS)
    before = dataset_bytes(out)
    with _interrupted_while_frozen(portable, latents, out, "--overwrite") as (job, said):
        last = said.strip().splitlines()[-1]
        assert "interrupted: could not confirm that job" in last, last
        assert "it commits nothing now" in last and "holds what it held before" in last
        assert_documented_exit(130, last)
    assert _wait_for(portable["jobs"], job["id"], {"DONE", "FAILED"}) == "DONE"
    assert dataset_bytes(out) == before
    assert_verified(out)
    run_job(latents, out, *FLAGS, "--overwrite")
    assert read_dataset_json(out)["run_id"] != json.loads(before["dataset.json"])["run_id"]
    assert not os.path.exists(out / "_make_shards")
    assert_verified(out)


def _pool_group(root, name: str) -> int:
    """The process group of a worker pool (it and the SDK workers it started)."""
    with open(root / f"{name}.pid") as f:
        return int(f.read())


def _holds_a_file_under(group: int, roots: tuple[str, ...]) -> bool:
    """Whether a process of `group` has a file under one of `roots` open: a worker
    inside a bundle that reads an input or writes a sorted file or a shard."""
    for process in psutil.process_iter():
        with contextlib.suppress(psutil.Error, ProcessLookupError):
            if os.getpgid(process.pid) == group and any(
                    f.path.startswith(roots) for f in process.open_files()):
                return True
    return False


def _freeze_inside_a_bundle(group: int, roots: tuple[str, ...], launcher: JobProcess
                            ) -> None:
    """SIGSTOP the pool's group at a moment one of its workers is inside a bundle (it
    has a file under one of `roots` open); else let it go on a moment and look again. Beam's
    job service notices a worker that dies in a bundle (its bundle fails), but not one
    that dies between two (it waits for the next bundle's answer for ever): the
    failure this test is about is the first."""
    deadline = time.monotonic() + 120
    while True:
        os.killpg(group, signal.SIGSTOP)
        if _holds_a_file_under(group, roots):
            return
        os.killpg(group, signal.SIGCONT)
        assert launcher.poll() is None and time.monotonic() < deadline, \
            "no worker was ever caught inside a bundle"
        time.sleep(0.005)


def test_a_job_whose_workers_are_killed_ends_in_one_line(portable, tmp_path, rng):
    """The worker pool is killed (SIGKILL, its whole process group) while its worker is
    inside a bundle: the job fails on the runner, and the launcher says so in its last
    line, with what the directory holds, and no traceback before it. The videos are long
    enough (about 16,000 windows) for a worker to be caught reading them."""
    out, inputs = tmp_path / "out", tmp_path / "in"
    write_videos(str(inputs), random_videos(rng, 32, lengths=(1200, 1800)), files=2)
    with worker_pool(str(tmp_path), "doomed") as pool:
        launcher = JobProcess(["--input", inputs / "*.tfrecord", "--output_dir", out, *FLAGS,
                               *options(portable["jobs"], pool)])
        job = _job_of_lease(out)
        group = _pool_group(tmp_path, "doomed")
        _freeze_inside_a_bundle(group, (str(inputs), str(out)), launcher)
        os.killpg(group, signal.SIGKILL)   # gone: the job service sees the bundle fail
        assert launcher.wait(300) == 1
    said = launcher.stderr.read()
    assert "Traceback" not in said and "ERROR" not in said, said
    last = said.strip().splitlines()[-1]
    assert [line for line in said.splitlines() if "error" in line.lower()] == [last], said
    assert f"job {job['id']} on PortableRunner at {portable['jobs']} failed (" in last, last
    assert "nothing was committed" in last, last
    assert _state(portable["jobs"], job["id"]) == "FAILED"
    assert not os.path.exists(out / "dataset.json")

