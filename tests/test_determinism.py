"""The same input, flags and seed give byte-identical shards: two runs, both shuffles, any
bucket size (one and two worker processes, and the runners: test_runs.py)."""
import pytest
from helpers import random_videos, read_dataset_json, run_job, same_dataset_files, write_videos

FLAGS = ["--window", "10", "--stride", "3", "--splits", "train=0.7,test=0.3",
         "--num_shards", "3", "--seed", "7"]


@pytest.fixture
def latents(tmp_path, rng):
    write_videos(str(tmp_path / "in"), random_videos(rng, 12, lengths=(8, 50)), files=4)
    return str(tmp_path / "in" / "*.tfrecord")


@pytest.mark.slow
def test_two_runs_and_bucket_sizes_give_identical_bytes(tmp_path, latents):
    run_job(latents, tmp_path / "a", *FLAGS)
    run_job(latents, tmp_path / "b", *FLAGS, "--shuffle_bucket_mb", "0.003",
            "--spill_buffer_mb", "0.003")
    same_dataset_files(tmp_path / "a", tmp_path / "b")
    run_job(latents, tmp_path / "c", *FLAGS[:-1], "8")
    splits = read_dataset_json(tmp_path / "c")["splits"]
    assert splits != read_dataset_json(tmp_path / "a")["splits"]


@pytest.mark.slow
def test_spill_and_group_shuffles_give_identical_bytes(tmp_path, latents):
    run_job(latents, tmp_path / "spill", *FLAGS, "--shuffle", "spill",
            "--spill_buffer_mb", "0.01")
    run_job(latents, tmp_path / "group", *FLAGS, "--shuffle", "group",
            "--shuffle_bucket_mb", "0.01")
    same_dataset_files(tmp_path / "spill", tmp_path / "group")
    assert read_dataset_json(tmp_path / "group")["flags"]["shuffle"] == "group"
    assert read_dataset_json(tmp_path / "spill")["flags"]["shuffle"] == "spill"


def test_auto_picks_spill_for_local_runners_and_group_for_the_others():
    from beam_jobs.job.command_line import runner_name
    from beam_jobs.job.runners import shuffle_mode

    def mode(*runner):
        return shuffle_mode("auto", runner_name(["--runner", *runner] if runner else []))

    for runner in ((), ("FnApiRunner",), ("DirectRunner",), ("direct",), ("PrismRunner",)):
        assert mode(*runner) == "spill", runner
    for runner in ("DataflowRunner", "dataflow", "FlinkRunner", "SparkRunner",
                   "PortableRunner"):
        assert mode(runner) == "group", runner
    assert shuffle_mode("group", "FnApiRunner") == "group"
