"""How the job runs: Dataflow submission (dry run), runners, killed runs, progress."""
import filecmp
import os
import signal
import tarfile
import time

import pytest
from helpers import (
    assert_verified,
    job_line,
    plain_dataset_json,
    plain_name,
    plain_names,
    run_job,
    staged_files,
)
from input_files import (
    random_videos,
    solid_frames,
    write_frame_folder,
    write_manifest,
    write_videos,
)
from job_process import JobProcess

from beam_jobs import make_shards

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@pytest.mark.slow
def test_dataflow_dry_run_stages_the_project_and_builds_the_graph(tmp_path, rng):
    write_videos(str(tmp_path / "in"), random_videos(rng, 2), files=1)
    cwd = os.getcwd()
    os.chdir(ROOT)
    try:
        result = make_shards.run([
            "--input", str(tmp_path / "in" / "*"), "--output_dir", "gs://test-bucket/out",
            "--window", "5", "--runner", "DataflowRunner", "--dry_run=True",
            "--project", "test-project", "--region", "us-central1",
            "--temp_location", "gs://test-bucket/tmp", "--setup_file", "./setup.py"])
    finally:
        os.chdir(cwd)
    pipeline = result.job.proto_pipeline
    names = {t.unique_name for t in pipeline.components.transforms.values()}
    assert {"CutWindows", "WriteShards", "Finalize"} <= names
    # on Dataflow, auto picks the group shuffle: no per-bundle spill files
    assert "WriteShards/GroupBuckets" in names and "WriteShards/Spill" not in names
    staged = staged_files(pipeline)
    with tarfile.open(staged["workflow.tar.gz"]) as tar:
        members = {m.name.split("/", 1)[1] for m in tar.getmembers() if "/" in m.name}
    assert {"beam_jobs/make_shards.py", "beam_jobs/shuffle/write.py", "readers/format/__init__.py",
            "readers/format/wire.py", "beam_jobs/encoders/onnx_models.py",
            "readers/tfdata/dataset.py", "beam_jobs/dependencies.py", "setup.py"} <= members
    # a worker installs that sdist without extras (the light reader's install_requires):
    # the job's own libraries come as a requirements file, installed from PyPI at start-up
    with open(staged["requirements.txt"]) as f:
        assert f.read().split() == ["av==18.1.0", "blake3==1.0.11", "gcsfs==2026.10.1"]
    assert result.job.options.get_all_options()["requirements_cache"] == "skip"


@pytest.fixture
def latents(tmp_path, rng):
    write_videos(str(tmp_path / "in"), random_videos(rng, 10, lengths=(20, 60)), files=3)
    return str(tmp_path / "in" / "*")


FLAGS = ["--window", "8", "--stride", "4", "--num_shards", "3", "--splits", "train=0.8,val=0.2"]


def _same_shards(a, b):
    """The same shards, byte for byte, under the same names but for their run ids."""
    def shards(directory):
        return {plain_name(n): os.path.join(directory, n) for n in os.listdir(directory)
                if n.endswith(".tfrecord")}
    ours, theirs = shards(a), shards(b)
    assert ours and sorted(ours) == sorted(theirs)
    assert all(filecmp.cmp(ours[n], theirs[n], shallow=False) for n in ours)


@pytest.mark.slow
def test_fnapi_and_direct_runner_give_identical_bytes(tmp_path, latents):
    run_job(latents, tmp_path / "fnapi", *FLAGS, "--runner", "FnApiRunner")
    run_job(latents, tmp_path / "direct", *FLAGS, "--runner", "DirectRunner")
    _same_shards(tmp_path / "fnapi", tmp_path / "direct")


@pytest.mark.slow
def test_all_cores_runs_worker_processes_with_the_same_output(tmp_path, latents):
    """The command forks its workers (forked_workers); run() in a process that has run
    pipelines starts Beam's own: the same bytes either way, as one process's, with a
    spill after every few windows in each worker. The workers write their own progress
    lines."""
    workers = ["--all_cores", "--direct_num_workers", "2"]   # workers, however small
    run_job(latents, tmp_path / "one", *FLAGS)
    run_job(latents, tmp_path / "all", *FLAGS, *workers, "--spill_buffer_mb", "0.01")
    _same_shards(tmp_path / "one", tmp_path / "all")
    command = JobProcess(_job(latents, tmp_path / "forked", *workers,
                              "--progress_interval", "0.001"))
    code, stderr = command.wait(), command.stderr.read()
    assert code == 0, stderr[-3000:]
    assert_verified(tmp_path / "forked")
    _same_shards(tmp_path / "one", tmp_path / "forked")
    pids = {line.split("worker ")[1].split(":")[0] for line in stderr.splitlines()
            if line.startswith("INFO beam_jobs.progress: worker")}
    assert pids and str(command.pid) not in pids


def _job(input_glob, output_dir, *extra):
    return ["--input", input_glob, "--output_dir", str(output_dir), *FLAGS, *extra]


@pytest.mark.slow
@pytest.mark.parametrize("kill_when", ["spilled", "shard_written"])
def test_a_killed_run_leaves_no_dataset_and_the_same_command_then_succeeds(
        tmp_path, rng, kill_when):
    write_videos(str(tmp_path / "in"), random_videos(rng, 40, lengths=(300, 400), dim=64),
                 files=8)
    latents, out = str(tmp_path / "in" / "*"), tmp_path / "out"
    command = _job(latents, out, "--spill_buffer_mb", "0.2")
    process = JobProcess(command)
    runs = out / "_make_shards" / "runs"

    def reached() -> bool:
        if kill_when == "spilled":
            return any(f.endswith(".sorted") for _, _, files in os.walk(runs) for f in files)
        return out.exists() and any(n.endswith(".tfrecord") for n in os.listdir(out))

    deadline = time.monotonic() + 120
    while not reached() and process.poll() is None and time.monotonic() < deadline:
        time.sleep(0.02)
    assert process.poll() is None, "the run ended before it could be killed"
    os.killpg(process.pid, signal.SIGKILL)
    process.wait()
    assert not (out / "dataset.json").exists()
    assert (out / "_make_shards" / "lease.json").exists()  # stale: its process is gone

    # the same command, run again (in this process: the killed one's was the point)
    run_job(latents, out, *FLAGS, "--spill_buffer_mb", "0.2")
    run_job(latents, tmp_path / "clean", *FLAGS, "--spill_buffer_mb", "0.2")
    _same_shards(out, tmp_path / "clean")
    assert plain_names(os.listdir(out)) == plain_names(os.listdir(tmp_path / "clean"))
    assert plain_dataset_json(out)["splits"] == plain_dataset_json(tmp_path / "clean")["splits"]


@pytest.mark.slow
def test_progress_lines_on_stderr_and_the_summary_in_the_log(tmp_path, latents, capsys,
                                                            caplog):
    caplog.set_level("INFO")
    run_job(latents, tmp_path / "out", *FLAGS, "--progress_interval", "0")
    progress = [line for line in capsys.readouterr().err.splitlines()
                if "beam_jobs.progress" in line]
    # --progress_interval 0: a line after every video (latents: no total known)
    done = [int(line.split(": ", 2)[2].split(" video")[0]) for line in progress]
    assert done == list(range(1, 11)), progress
    assert all("windows" in line and "frames/s" in line for line in progress)
    table = caplog.text[caplog.text.index("split  videos"):]
    assert all(word in table for word in ("train", "val", "frames/s"))


def test_spill_on_a_distributed_runner_is_refused_in_one_line(tmp_path, latents, capsys):
    line = job_line(capsys, "--input", latents, "--output_dir", tmp_path / "out", "--window",
                    "8", "--shuffle", "spill", "--runner", "DataflowRunner", "--project",
                    "test-project", "--region", "us-central1", "--temp_location",
                    "gs://test-bucket/tmp")
    assert "--shuffle spill" in line and "DataflowRunner" in line
    assert not os.path.exists(tmp_path / "out")


@pytest.mark.slow
def test_group_on_a_local_runner_says_how_much_memory_it_needs(tmp_path, latents, caplog):
    run_job(latents, tmp_path / "out", *FLAGS, "--shuffle", "group")
    (line,) = [r.getMessage() for r in caplog.records if "--shuffle group" in r.getMessage()]
    assert "FnApiRunner" in line and "GB" in line and "\n" not in line
    caplog.clear()
    run_job(latents, tmp_path / "spill", *FLAGS, "--shuffle", "spill")
    assert not [r for r in caplog.records if "--shuffle group" in r.getMessage()]


@pytest.mark.parametrize("extra, needle", [
    (["--runner", "DataflowRunner", "--project", "test-project", "--region", "us-central1",
      "--temp_location", "gs://test-bucket/tmp"], "pass --setup_file ./setup.py"),
    (["--runner", "DataflowRunner", "--project", "test-project", "--region", "us-central1",
      "--temp_location", "gs://test-bucket/tmp", "--setup_file", "./setup.py",
      "--job_name", "Not_A_Job_Name", "--dry_run=True"],
     "DataflowRunner: Invalid job_name (Not_A_Job_Name);"),
    (["--runner", "PortableRunner", "--job_endpoint", "localhost:1", "--environment_type",
      "LOOPBACK", "--detach"], "--detach with --environment_type LOOPBACK"),
], ids=["no package for the workers", "beam's own check", "detached loopback"])
def test_a_distributed_run_that_could_not_work_is_refused_before_it_makes_anything(
        tmp_path, latents, capsys, extra, needle):
    out = tmp_path / "out"
    last = job_line(capsys, "--input", latents, "--output_dir", out, "--window", "4", *extra)
    assert needle in last, last
    assert not out.exists()   # no lease, no run folder


def _dry_run_graph_bytes(manifest) -> int:
    cwd = os.getcwd()
    os.chdir(ROOT)
    try:
        result = make_shards.run([
            "--input", str(manifest), "--output_dir", "gs://test-bucket/out", "--window", "2",
            "--runner", "DataflowRunner", "--dry_run=True", "--project", "test-project",
            "--region", "us-central1", "--temp_location", "gs://test-bucket/tmp",
            "--sdk_container_image", "example.com/make-shards:latest"])
    finally:
        os.chdir(cwd)
    return result.job.proto_pipeline.ByteSize()


@pytest.mark.slow
def test_the_job_graph_does_not_grow_with_the_manifest(tmp_path):
    """Dataflow limits a job graph to about 20 MB: manifest rows are read in the pipeline,
    not embedded in it (about 630 bytes a row would reach the limit at ~30,000 rows, and
    would make 10,000 rows a graph of 6 MB)."""
    write_frame_folder(tmp_path / "f", solid_frames(3, size=(8, 8)))
    sizes = []
    for rows in (1_000, 10_000):
        manifest = write_manifest(tmp_path / f"m{rows}.jsonl", [
            {"video_id": f"video-{i:06d}", "frames": "f"} for i in range(rows)])
        sizes.append(_dry_run_graph_bytes(manifest))
    assert sizes[1] <= 1.2 * sizes[0], sizes
