"""The output directory: the job touches only files it can prove it wrote, one run at a
time writes there, and the leftovers of killed runs go away."""
import json
import os
import shutil
import signal
import subprocess
import sys
import time

import numpy as np
import pytest
from helpers import (
    assert_documented_exit,
    assert_verified,
    job_line,
    plain_names,
    read_dataset_json,
    run_job,
)
from input_files import random_videos, write_videos
from job_process import JobProcess


@pytest.fixture(scope="module")
def small_input(tmp_path_factory):
    directory = tmp_path_factory.mktemp("in")
    write_videos(str(directory), random_videos(np.random.default_rng(0), 4), files=2)
    return str(directory / "*.tfrecord")


@pytest.fixture(scope="module")
def committed(small_input, tmp_path_factory) -> str:
    """A dataset of `small_input`, committed."""
    out = tmp_path_factory.mktemp("committed") / "out"
    run_job(small_input, out, "--window", "5")
    return str(out)


def _refused(capsys, *argv) -> str:
    """Run the job in-process, expecting a one-line refusal; return that line."""
    last = job_line(capsys, *argv)
    assert last.startswith("python -m beam_jobs.make_shards: error:")
    return last


def _job(input_glob, out, *extra):
    return ["--input", input_glob, "--output_dir", str(out), "--window", "5", *extra]


def _tree(directory) -> dict:
    """Every file under `directory` and its bytes."""
    out = {}
    for root, _, files in os.walk(directory):
        for name in files:
            path = os.path.join(root, name)
            with open(path, "rb") as f:
                out[os.path.relpath(path, directory)] = f.read()
    return out


def test_a_file_named_like_a_shard_is_foreign_and_never_deleted(tmp_path, small_input, capsys):
    out = tmp_path / "out"
    out.mkdir()
    shutil.copy(small_input.replace("*", "lat-0"), out / "lat-00000-of-00002.tfrecord")
    before = _tree(out)
    for extra in ([], ["--overwrite"]):
        line = _refused(capsys, *_job(small_input, out, *extra))
        assert "did not write (lat-00000-of-00002.tfrecord)" in line
        assert _tree(out) == before


@pytest.mark.slow
def test_an_output_dir_holding_an_input_or_under_its_glob_is_refused(tmp_path, capsys):
    data = tmp_path / "data"
    write_videos(str(data), random_videos(np.random.default_rng(1), 3), files=1)
    before = _tree(data)
    (name,) = os.listdir(data)
    line = _refused(capsys, *_job(str(data / name), data))
    assert "holds the input file" in line
    line = _refused(capsys, *_job(str(data / "*.tfrecord"), data))
    assert f"the input glob {data}/*.tfrecord covers {data}" in line
    line = _refused(capsys, *_job(str(data / "**"), data / "out"))
    assert "the input glob" in line and "covers" in line
    assert _tree(data) == before and not (data / "out").exists()
    run_job(str(data / "*.tfrecord"), data / "shards", "--window", "5")  # not covered
    assert (data / "shards" / "dataset.json").exists()
    # once the output holds a dataset, the glob matches its shards too: the reason is
    # still the output, not "mixed kinds" or "reads its own shards"
    (data / "videos.jsonl").write_text("")
    line = _refused(capsys, *_job(str(data / "**"), data / "shards"))
    assert f"the input glob {data}/** covers {data}/shards" in line


@pytest.mark.slow
@pytest.mark.parametrize("spelling", ["plain", "trailing slash", "doubled slashes",
                                      "relative", "glob characters", "symlink"])
def test_every_spelling_of_the_output_dir_gets_the_same_protection(
        tmp_path, small_input, committed, capsys, monkeypatch, spelling):
    name = "o[1]*t?" if spelling == "glob characters" else "out"
    real = tmp_path / name
    arg = {"plain": str(real), "trailing slash": f"{real}/",
           "doubled slashes": str(real).replace("/", "//") + "//", "relative": f"./{name}/",
           "glob characters": str(real), "symlink": str(tmp_path / "link")}[spelling]
    monkeypatch.chdir(tmp_path)
    shutil.copytree(committed, real)      # a dataset the job wrote, under this spelling
    if spelling == "symlink":
        os.symlink(real, tmp_path / "link")
    first = read_dataset_json(real)["run_id"]
    assert "already holds a dataset" in _refused(capsys, *_job(small_input, arg))
    run_job(small_input, arg, "--window", "6", "--overwrite")
    assert read_dataset_json(real)["run_id"] != first
    assert plain_names(os.listdir(real)) == ["dataset.json", "dataset_info.json",
                                             "failures.jsonl",
                                             "train-00000-of-00001.tfrecord",
                                             "train-00000-of-00001.tfrecord.index",
                                             "train-00000-of-00001.tfrecord.table",
                                             "videos.jsonl"]
    (real / "notes.txt").write_text("mine")
    assert "did not write (notes.txt)" in _refused(capsys, *_job(small_input, arg, "--overwrite"))
    assert (real / "notes.txt").read_text() == "mine" and (real / "dataset.json").exists()


def test_an_empty_output_dir_or_a_file_is_refused(tmp_path, small_input, capsys):
    assert "--output_dir is empty" in _refused(capsys, *_job(small_input, ""))
    (tmp_path / "file").write_text("x")
    assert "is a file, not a directory" in _refused(capsys, *_job(small_input, tmp_path / "file"))
    assert (tmp_path / "file").read_text() == "x"


@pytest.mark.slow
def test_symbolic_links_are_never_followed(tmp_path, small_input, capsys):
    victim = tmp_path / "victim"
    victim.mkdir()
    (victim / "precious.txt").write_text("keep me")
    out = tmp_path / "out"
    out.mkdir()
    os.symlink(victim, out / "_make_shards")      # the job's state folder, as a link
    assert "did not write (_make_shards)" in _refused(capsys, *_job(small_input, out))
    os.unlink(out / "_make_shards")

    run_job(small_input, out, "--window", "5")
    shard = read_dataset_json(out)["splits"]["train"]["shards"][0]["file"]
    os.unlink(out / shard)
    os.symlink(victim / "precious.txt", out / shard)  # a listed shard, now a link
    assert f"did not write ({shard})" in _refused(capsys, *_job(small_input, out, "--overwrite"))
    assert (victim / "precious.txt").read_text() == "keep me"


@pytest.mark.slow
def test_names_in_job_files_never_reach_outside(tmp_path, small_input, capsys):
    (tmp_path / "victim.txt").write_text("keep me")
    out = tmp_path / "out"
    run_job(small_input, out, "--window", "5")
    meta = read_dataset_json(out)
    meta["files"].append("../victim.txt")
    (out / "dataset.json").write_text(json.dumps(meta))
    before = _tree(out)
    line = _refused(capsys, *_job(small_input, out, "--overwrite"))
    assert '"../victim.txt" is not the plain name' in line and "remove it" in line
    assert (tmp_path / "victim.txt").read_text() == "keep me"
    assert _tree(out) == before


def _dead_pid() -> int:
    process = subprocess.Popen([sys.executable, "-c", "pass"])
    process.wait()
    return process.pid


@pytest.mark.slow
def test_leftovers_of_a_run_killed_after_it_committed_are_removed(tmp_path, small_input, capsys):
    out = tmp_path / "out"
    run_job(small_input, out, "--window", "5")
    before = _tree(out)
    run_id = read_dataset_json(out)["run_id"]
    # What a kill between the commit and the cleanup leaves: the run folder with its
    # temp data, and the lease of a process that is gone.
    folder = out / "_make_shards" / "runs" / run_id
    (folder / "tmp" / "train" / "00000").mkdir(parents=True)
    (folder / "tmp" / "train" / "00000" / "x.rec").write_bytes(b"spilled")
    (folder / "run.json").write_text(json.dumps(
        {"run_id": run_id, "temp_dir": str(folder / "tmp"), "sidecars": ["failures.jsonl"]}))
    (folder / "shards.json").write_text(json.dumps(["train-00000-of-00001.tfrecord"]))
    (out / "_make_shards" / "lease.json").write_text(json.dumps(
        {"run_id": run_id, "host": os.uname().nodename, "pid": _dead_pid(),
         "started": time.time(), "expires": time.time() + 3600}))
    assert "already holds a dataset" in _refused(capsys, *_job(small_input, out))
    assert _tree(out) == before   # the leftovers are gone, the dataset is whole
    assert_verified(out)


@pytest.mark.slow
def test_a_second_run_is_refused_while_the_first_writes(tmp_path, rng, capsys):
    write_videos(str(tmp_path / "in"), random_videos(rng, 8, lengths=(100, 120), dim=8),
                 files=2)
    out = tmp_path / "out"
    first = JobProcess(["--input", tmp_path / "in" / "*", "--output_dir", out, "--window", "8",
                        "--stride", "4", "--num_shards", "3", "--spill_buffer_mb", "0.2"])
    deadline = time.monotonic() + 60
    while not (out / "_make_shards" / "lease.json").exists() and time.monotonic() < deadline:
        time.sleep(0.02)
    # Held still while the second run starts (seconds), so that how fast either runs
    # does not matter: it holds the lease, alive, as a busy run would.
    os.kill(first.pid, signal.SIGSTOP)
    try:
        assert first.poll() is None, "the first run ended before it could be held"
        last = job_line(capsys, "--input", tmp_path / "in" / "*", "--output_dir", out,
                        "--window", "5", "--overwrite")
    finally:
        os.kill(first.pid, signal.SIGCONT)
    assert "is being written by run" in last and f"pid {first.pid}" in last
    assert_documented_exit(2, last)   # as a paused run's, continued while another holds it
    assert first.wait() == 0, first.stderr.read()[-2000:]
    assert read_dataset_json(out)["window"]["length"] == 8
    assert_verified(out)
    assert plain_names(os.listdir(out)) == [
        "dataset.json", "dataset_info.json", "failures.jsonl"] + [
        f"train-0000{i}-of-00003.tfrecord{x}" for i in range(3)
        for x in ("", ".index", ".table")] + [
        "videos.jsonl"]
