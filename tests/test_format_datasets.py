"""tests/format_datasets.py writes what the job writes, so that the reader tests over its
datasets (tests/readers_only/) test what a job run gives: for every kind of KIND_FLAGS
(conftest.py's `kinds`, built by the job from the same videos) and for padded tails,
every file byte for byte (shards, indexes, window tables, side files, dataset.json with
its statistics, dataset_info.json), given what only the job knows: the run id, the flags
dataset.json records, its version and each video's content digest."""
import json
import os

import pytest
from format_datasets import KIND_FLAGS, kind_videos, write_dataset, write_kind
from helpers import read_dataset_json, run_job, sidecar
from input_files import write_frame_folder, write_manifest, write_videos


def _job_knows(path) -> dict:
    """write_dataset's options that make it write the job's dataset in `path`."""
    meta = read_dataset_json(path)
    with open(sidecar(path, "videos")) as f:
        digests = {row["video_id"]: row["digest"] for row in map(json.loads, f)}
    return {"run_id": meta["run_id"], "recorded_flags": meta["flags"],
            "job_version": meta["job_version"],
            "digest": lambda video: digests[video.video_id]}


def _assert_same_files(job, ours) -> None:
    names = sorted(os.listdir(job))
    assert names == sorted(os.listdir(ours))
    for name in names:
        with open(os.path.join(job, name), "rb") as a, open(os.path.join(ours, name), "rb") as b:
            assert a.read() == b.read(), name


@pytest.mark.slow
@pytest.mark.parametrize("kind", sorted(KIND_FLAGS))
def test_the_format_writer_writes_the_jobs_bytes(kinds, kind, tmp_path):
    job = kinds[kind]
    videos = kind_videos(os.path.dirname(job))     # the job's inputs lie beside its datasets
    ours = write_kind(tmp_path / kind, kind, videos, **_job_knows(job))
    _assert_same_files(job, ours)


@pytest.mark.slow
def test_padded_tails_are_the_jobs_too(tmp_path):
    """Windows past a video's end (`--tail pad`), latent and PNG frames with labels."""
    videos = kind_videos(str(tmp_path))
    write_videos(str(tmp_path / "lat"), [(v.frames, v.metadata) for v in videos["lat"]], files=2)
    rows = []
    for video in videos["pixels"]:
        write_frame_folder(tmp_path / video.video_id, list(video.frames))
        rows.append({"video_id": video.video_id, "frames": video.video_id,
                     "labels": video.labels.tolist(), "metadata": video.metadata.tolist(),
                     **video.fields})
    write_manifest(tmp_path / "m.jsonl", rows)
    for name, source, flags in (
            ("lat", "lat/*", ["--window", "5", "--stride", "3", "--num_shards", "2"]),
            ("pixels", "m.jsonl", ["--window", "4", "--stride", "3", "--frame_encoding", "png"])):
        job = tmp_path / f"job_{name}"
        run_job(str(tmp_path / source), job, "--tail", "pad", *flags)
        ours = write_dataset(tmp_path / f"ours_{name}", videos[name], "--tail", "pad", *flags,
                             **_job_knows(job))
        _assert_same_files(job, ours)
        assert read_dataset_json(job)["window"]["tail"] == "pad"
