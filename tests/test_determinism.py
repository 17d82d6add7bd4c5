"""The same input, flags and seed give byte-identical shards: two runs, the three shuffles,
any bucket size (one and two worker processes, and the runners: test_runs.py)."""
import pytest
from helpers import assert_verified, job_line, read_dataset_json, run_job, same_dataset_files
from input_files import (
    random_videos,
    solid_frames,
    write_frame_folder,
    write_manifest,
    write_videos,
)

from beam_jobs.job.flags import PROG

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
def test_place_spill_and_group_shuffles_give_identical_bytes(tmp_path, latents):
    run_job(latents, tmp_path / "place", *FLAGS, "--shuffle", "place",
            "--spill_buffer_mb", "0.003")
    run_job(latents, tmp_path / "spill", *FLAGS, "--shuffle", "spill",
            "--spill_buffer_mb", "0.01")
    run_job(latents, tmp_path / "group", *FLAGS, "--shuffle", "group",
            "--shuffle_bucket_mb", "0.01")
    same_dataset_files(tmp_path / "place", tmp_path / "spill")
    same_dataset_files(tmp_path / "spill", tmp_path / "group")
    for mode in ("place", "spill", "group"):
        assert read_dataset_json(tmp_path / mode)["flags"]["shuffle"] == mode
        assert_verified(tmp_path / mode)


def test_auto_places_latents_on_local_runners_and_groups_on_the_others(tmp_path, latents):
    from beam_jobs.job.command_line import runner_name
    from beam_jobs.job.flags import parse_args
    from beam_jobs.job.runners import shuffle_mode

    def mode(*flags, runner=()):
        config, _ = parse_args(["--input", latents, "--output_dir", str(tmp_path / "out"),
                                *FLAGS, *flags])
        return shuffle_mode(runner_name(["--runner", *runner] if runner else []), config)

    for runner in ((), ("FnApiRunner",), ("DirectRunner",), ("direct",), ("PrismRunner",)):
        assert mode(runner=runner) == "place", runner
    for runner in ("DataflowRunner", "dataflow", "FlinkRunner", "SparkRunner",
                   "PortableRunner"):
        assert mode(runner=(runner,)) == "group", runner
    assert mode("--compression", "gzip") == "spill"    # a compressed stream: no offsets


def test_place_is_refused_where_it_cannot_write(tmp_path, latents, capsys):
    write_frame_folder(tmp_path / "v", solid_frames(12))
    manifest = write_manifest(tmp_path / "m.jsonl", [{"video_id": "v", "frames": "v"}])
    jobs = {
        "a distributed runner": ([latents], ["--runner", "DataflowRunner"]),
        "--compression gzip": ([latents], ["--compression", "gzip"]),
        "pixel input (manifest)": ([manifest], ["--frame_size", "24x32"]),
    }
    for why, (inputs, flags) in jobs.items():
        line = job_line(capsys, "--input", *inputs, "--output_dir", str(tmp_path / "out"),
                        *FLAGS, "--shuffle", "place", *flags)
        assert line.startswith(f"{PROG}: error: --shuffle place: ") and why in line, line
        assert not (tmp_path / "out").exists()
