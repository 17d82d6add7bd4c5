"""gs:// in and out, for real, against a GCS emulator started here on 127.0.0.1.

TensorFlow's own gs:// cannot reach an emulator, so the reader is tested on a local copy.
"""
import json
import os
import subprocess
import sys

import fsspec
import gcs_emulator
import keras
import numpy as np
import pytest
from apache_beam.testing.test_pipeline import TestPipeline as BeamTestPipeline
from helpers import (
    assert_verified,
    job_line,
    plain_name,
    plain_names,
    read_dataset_json,
    read_examples,
    run_job,
)
from input_files import latent_example, solid_frames, write_frame_folder

from beam_jobs.core import storage
from beam_jobs.outdir import lease

pytestmark = pytest.mark.slow   # every test runs the job


@pytest.fixture(scope="module")
def gcs():
    """A bucket `bkt` on an in-memory emulator; gcsfs and Beam's gs:// both point at it."""
    with gcs_emulator.running("bkt"):
        yield fsspec.filesystem("gs", skip_instance_cache=True)


def _download(fs, remote: str, local) -> None:
    """A local copy of a dataset on gs://, verified as every dataset a test builds."""
    os.makedirs(local, exist_ok=True)
    for path in fs.ls(remote, refresh=True):
        fs.get(path, os.path.join(str(local), path.rsplit("/", 1)[-1]))
    assert_verified(local)


def test_latents_from_and_to_gcs(gcs, tmp_path, rng):
    videos = [rng.standard_normal((n, 3)).astype(np.float32) for n in (30, 45, 12)]
    for i, frames in enumerate(videos):
        _put(f"gs://bkt/latents/part-{i}.tfrecord", _tfrecord([latent_example(frames, [i, 0])]))
    run_job("gs://bkt/latents/*.tfrecord", "gs://bkt/out", "--window", "10", "--stride", "5",
            "--num_shards", "2")
    names = plain_names(gcs.ls("bkt/out"))
    assert names == ["dataset.json", "dataset_info.json", "failures.jsonl",
                     "train-00000-of-00002.tfrecord", "train-00000-of-00002.tfrecord.index",
                     "train-00000-of-00002.tfrecord.table",
                     "train-00001-of-00002.tfrecord", "train-00001-of-00002.tfrecord.index",
                     "train-00001-of-00002.tfrecord.table",
                     "videos.jsonl"]
    _download(gcs, "bkt/out", tmp_path / "copy")
    examples = read_examples(tmp_path / "copy")
    assert len(examples) == read_dataset_json(tmp_path / "copy")["splits"]["train"]["windows"]
    for e in examples:
        frames = videos[int(e["video_id"].split("-")[1].split(".")[0])]
        np.testing.assert_array_equal(e["window"], frames[e["start"]:e["start"] + 10])

    import readers
    batch = next(iter(readers.make_dataset(str(tmp_path / "copy"), batch_size=4)))
    assert batch["window"].shape == (4, 10, 3)

    from readers.numpy import WindowSource  # reads gs:// itself, through fsspec
    gcs_emulator.reset_counts()
    remote, local = WindowSource("gs://bkt/out"), WindowSource(str(tmp_path / "copy"))
    everything = list(range(len(local))) * 2    # its layouts learnt, then used
    theirs = local.read_batch(everything)
    for name, column in remote.read_batch(everything).items():
        np.testing.assert_array_equal(column, theirs[name], err_msg=name)
    # dataset.json, each shard's index, then a ranged read per record, none twice
    assert gcs_emulator.counts()["read"] == 1 + 2 + len(everything)


def test_the_command_forks_all_cores_workers_that_write_to_gcs(gcs, tmp_path, rng):
    """--all_cores's workers are forks of a launcher that has already talked to GCS (the
    input's listing, the lease): each makes its own client, and the shards are those one
    process writes."""
    for i in range(4):
        frames = rng.standard_normal((40 + 10 * i, 3)).astype(np.float32)
        _put(f"gs://bkt/forked-in/part-{i}.tfrecord", _tfrecord([latent_example(frames, [i, 0])]))
    flags = ["--input", "gs://bkt/forked-in/*.tfrecord", "--window", "10", "--stride", "5",
             "--num_shards", "2"]
    run_job(flags[1], "gs://bkt/one", *flags[2:])
    # The command's own main() and exit, in a process whose Beam goes to the emulator
    # without looking for credentials (30 s of retries where there are none)
    argv = [*flags, "--output_dir", "gs://bkt/forked", "--all_cores"]
    code = ("import gcs_emulator\ngcs_emulator.anonymous_beam()\n"
            "from beam_jobs import make_shards\nfrom beam_jobs.job import lifecycle\n"
            f"lifecycle.exit_now(make_shards.main({argv!r}))\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          cwd=os.path.dirname(os.path.abspath(__file__)))
    assert done.returncode == 0, done.stderr[-3000:]
    shards = {}
    for name in ("one", "forked"):
        _download(gcs, f"bkt/{name}", tmp_path / name)
        shards[name] = {plain_name(f): (tmp_path / name / f).read_bytes()
                        for f in os.listdir(tmp_path / name) if f.endswith(".tfrecord")}
    assert len(shards["one"]) == 2 and shards["one"] == shards["forked"]


def test_manifest_frames_and_encoder_from_gcs(gcs, tmp_path):
    local = tmp_path / "frames"
    write_frame_folder(local, solid_frames(9))
    for name in os.listdir(local):
        gcs.put(str(local / name), f"bkt/px/v/{name}")
    gcs.pipe("bkt/px/m.jsonl", b'{"video_id": "v", "frames": "v", "labels": [0,1,2,3,4,5,6,7,8]}\n')
    model = keras.Sequential([keras.Input((24, 32, 3)), keras.layers.GlobalAveragePooling2D()])
    model.save(tmp_path / "enc.keras")
    gcs.put(str(tmp_path / "enc.keras"), "bkt/models/enc.keras")

    run_job("gs://bkt/px/m.jsonl", "gs://bkt/px_out", "--window", "3", "--stride", "3",
            "--encoder", "gs://bkt/models/enc.keras")
    _download(gcs, "bkt/px_out", tmp_path / "copy")
    examples = read_examples(tmp_path / "copy")
    assert sorted(int(e["start"]) for e in examples) == [0, 3, 6]
    for e in examples:   # the encoder averages the pixels: 8 * index, scaled to [0, 1]
        expected = [[8 * (e["start"] + i) / 255] * 3 for i in range(3)]
        np.testing.assert_allclose(e["window"], expected, atol=1e-5)
        assert e["labels"].tolist() == [e["start"] + i for i in range(3)]
    assert read_dataset_json(tmp_path / "copy")["encoder"]["path"] == "gs://bkt/models/enc.keras"


def _put(path: str, data: bytes) -> None:
    """Upload through google-cloud-storage: gcsfs's multipart body ends the data with a
    bare newline, and the emulator's parser then drops a last byte that is a CR."""
    storage.write_bytes(path, data)


def _tfrecord(records) -> bytes:
    import tensorflow as tf

    path = os.path.join(os.environ.get("TMPDIR", "/tmp"), f"rec-{os.getpid()}.tfrecord")
    with tf.io.TFRecordWriter(path) as w:
        for r in records:
            w.write(r)
    with open(path, "rb") as f:
        data = f.read()
    os.remove(path)
    return data


def test_gcs_output_dirs_get_the_same_protection(gcs, tmp_path, capsys):
    frames = np.arange(60, dtype=np.float32).reshape(20, 3)
    _put("gs://bkt/safe/in/a.tfrecord", _tfrecord([latent_example(frames, [1, 2])]))
    argv = ["--input", "gs://bkt/safe/in/*.tfrecord", "--window", "5"]

    def refused(out, *extra) -> str:
        return job_line(capsys, *argv, "--output_dir", out, *extra)

    gcs.pipe("bkt/safe/foreign/notes.txt", b"mine")
    assert "did not write (notes.txt)" in refused("gs://bkt/safe/foreign")
    assert gcs.cat("bkt/safe/foreign/notes.txt") == b"mine"

    held = lease.Lease("gs://bkt/safe/out/_make_shards/lease.json", "other").acquire()
    try:  # another live run holds the lease: create-if-absent refuses this one
        assert "is being written by run other" in refused("gs://bkt//safe/out/")
    finally:
        held.release()
    run_job("gs://bkt/safe/in/*.tfrecord", "gs://bkt//safe/out/", "--window", "5")
    assert "already holds a dataset" in refused("gs://bkt/safe/out")
    names = plain_names(gcs.ls("bkt/safe/out", refresh=True))
    assert names == ["dataset.json", "dataset_info.json", "failures.jsonl",
                     "train-00000-of-00001.tfrecord", "train-00000-of-00001.tfrecord.index",
                     "train-00000-of-00001.tfrecord.table",
                     "videos.jsonl"]
    _download(gcs, "bkt/safe/out", tmp_path / "copy")
    meta = json.loads(gcs.cat("bkt/safe/out/dataset.json"))
    assert plain_names(meta["files"]) == ["dataset_info.json", "failures.jsonl",
                                          "train-00000-of-00001.tfrecord",
                                          "train-00000-of-00001.tfrecord.index",
                                          "train-00000-of-00001.tfrecord.table", "videos.jsonl"]


def _latents_on_gcs(gcs, prefix: str, videos: int = 12, length: int = 40) -> None:
    rng = np.random.default_rng(3)
    for i in range(videos):
        frames = rng.standard_normal((length, 8)).astype(np.float32)
        _put(f"gs://bkt/{prefix}/part-{i:02d}.tfrecord", _tfrecord([latent_example(frames, [i])]))


def test_a_local_run_spills_to_local_disk_not_to_gcs(gcs, tmp_path):
    _latents_on_gcs(gcs, "spill_in")
    gcs_emulator.reset_counts()
    temp = tmp_path / "local_temp"
    temp.mkdir()
    run_job("gs://bkt/spill_in/*.tfrecord", "gs://bkt/spill_out", "--window", "8",
            "--stride", "4", "--spill_buffer_mb", "0.01", "--num_shards", "2",
            "--temp_location", str(temp))
    counts = gcs_emulator.counts()
    # created on GCS: the lease, run.json, shards.json, 2 shards and their 2 indexes and
    # 2 window tables, the failures and videos files, dataset.json and
    # dataset_info.json; no spilled sorted file
    assert counts.get("create", 0) == 13, counts
    assert not os.listdir(temp)   # the local spill files are gone
    names = plain_names(gcs.ls("bkt/spill_out", refresh=True))
    assert names == ["dataset.json", "dataset_info.json", "failures.jsonl",
                     "train-00000-of-00002.tfrecord", "train-00000-of-00002.tfrecord.index",
                     "train-00000-of-00002.tfrecord.table",
                     "train-00001-of-00002.tfrecord", "train-00001-of-00002.tfrecord.index",
                     "train-00001-of-00002.tfrecord.table",
                     "videos.jsonl"]
    _download(gcs, "bkt/spill_out", tmp_path / "copy")


def test_group_mode_on_gcs_deletes_its_temp_objects_in_batches(gcs, tmp_path):
    _latents_on_gcs(gcs, "group_in", videos=32, length=100)
    gcs_emulator.reset_counts()
    run_job("gs://bkt/group_in/*.tfrecord", "gs://bkt/group_out", "--window", "8",
            "--stride", "4", "--shuffle", "group", "--shuffle_bucket_mb", "0.002",
            "--num_shards", "3")
    counts = gcs_emulator.counts()
    meta = json.loads(gcs.cat("bkt/group_out/dataset.json"))
    assert meta["flags"]["shuffle"] == "group"
    # bucket files: one per bucket with windows (over 100), all deleted at the end, 100 a
    # batch request
    assert counts["objects_deleted"] > 100
    assert counts["batch"] <= counts["objects_deleted"] / 100 + 2, counts
    assert counts.get("delete", 0) <= 3  # single deletes: the lease only
    assert not gcs.ls("bkt/group_out/_make_shards", refresh=True) if gcs.exists(
        "bkt/group_out/_make_shards") else True
    _download(gcs, "bkt/group_out", tmp_path / "copy")


def test_overwrite_on_gcs_swaps_datasets_at_the_commit_and_a_jobs_lease(gcs, tmp_path):
    _latents_on_gcs(gcs, "swap_in", videos=4, length=30)
    argv = ("gs://bkt/swap_in/*.tfrecord", "gs://bkt/swap", "--window", "8", "--num_shards", "2")
    run_job(*argv)
    first = json.loads(gcs.cat("bkt/swap/dataset.json"))
    gcs_emulator.reset_counts()
    run_job(*argv, "--overwrite")
    second = json.loads(gcs.cat("bkt/swap/dataset.json"))
    names = sorted(p.rsplit("/", 1)[-1] for p in gcs.ls("bkt/swap", refresh=True))
    assert names == sorted(second["files"] + ["dataset.json"])
    assert not set(first["files"]) & set(names) - {"dataset_info.json"}
    # the old shards and indexes went in one checked batch request, not one by one
    assert gcs_emulator.counts().get("delete", 0) <= 1     # single deletes: the lease
    _download(gcs, "bkt/swap", tmp_path / "copy")

    from beam_jobs import outdir
    from beam_jobs.outdir.holder import Job
    claim = outdir.prepare(outdir.ClaimRequest("gs://bkt/swap", overwrite=True,
                                               job=Job("PortableRunner", "make-shards-test")))
    held = json.loads(gcs.cat("bkt/swap/_make_shards/lease.json"))
    assert held["job"]["name"] == "make-shards-test" and held["expires"] is None
    with pytest.raises(outdir.OutputDirError, match="job make-shards-test"):
        outdir.prepare(outdir.ClaimRequest("gs://bkt/swap", overwrite=True))
    outdir.release_lease(claim.run)   # what the pipeline's last step does, by the generation read
    assert not gcs.exists("bkt/swap/_make_shards/lease.json")
    outdir.abandon(claim.run)
    outdir.release(claim)
    assert json.loads(gcs.cat("bkt/swap/dataset.json")) == second


def test_an_append_on_gcs_writes_only_the_new_generation(gcs, tmp_path):
    """The old shards, indexes and window tables keep their object generation (never
    rewritten, copied or deleted); the append creates what a build of the new videos
    creates, no more."""
    _latents_on_gcs(gcs, "grow_in", videos=6, length=30)
    argv = ("gs://bkt/grow_in/*.tfrecord", "gs://bkt/grow", "--window", "8", "--num_shards",
            "2", "--append")
    run_job(*argv)
    old = {path: gcs.info(path)["generation"] for path in gcs.ls("bkt/grow", refresh=True)
           if ".tfrecord" in path}
    rng = np.random.default_rng(9)
    _put("gs://bkt/grow_in/part-new.tfrecord", _tfrecord(
        [latent_example(rng.standard_normal((30, 8)).astype(np.float32), [9])]))
    gcs_emulator.reset_counts()
    run_job(*argv)
    counts = gcs_emulator.counts()
    assert {path: gcs.info(path)["generation"] for path in old} == old
    # created: the lease, run.json, shards.json, 2 new shards and their indexes and
    # window tables, the failures and videos files, dataset.json and dataset_info.json
    assert counts.get("create", 0) == 13, counts
    # copied: the three files moved from the run folder (a rename on GCS); the old
    # shards are never a copy's source or target
    assert counts.get("post", 0) == 3, counts
    meta = json.loads(gcs.cat("bkt/grow/dataset.json"))
    assert [g["videos"] for g in meta["generations"]] == [6, 1]
    assert meta["generations"][1]["skipped_existing"] == 6
    _download(gcs, "bkt/grow", tmp_path / "copy")


def test_a_distributed_run_leaves_earlier_runs_leftovers_to_its_pipeline(gcs, tmp_path, rng):
    """A failed run's 250 objects (shards, indexes, temp buckets) are not deleted by the
    launcher that claims the directory, but by the pipeline, in batches of 1,000 paths
    (GCS batch requests of 100), and its folder last."""
    from beam_jobs import outdir
    from beam_jobs.commit.leftovers import ClearLeftovers
    from beam_jobs.outdir.holder import Job
    from readers import format as data_format

    failed = "0123456789ab"
    shards = [data_format.shard_name("train", i, 100, "none", failed) for i in range(100)]
    folder = f"bkt/leftovers/_make_shards/runs/{failed}"
    objects = {f"{folder}/run.json": json.dumps({"run_id": failed, "temp_dir": f"gs://{folder}/tmp",
                                                 "sidecars": [], "replaces": []}).encode(),
               f"{folder}/shards.json": json.dumps(shards).encode(),
               **{f"bkt/leftovers/{name}": b"x" for name in shards},
               **{f"bkt/leftovers/{name}.index": b"0" for name in shards},
               **{f"{folder}/tmp/bucket-{i}": b"y" for i in range(48)}}
    for path, data in objects.items():   # one at a time: gcsfs's parallel pipe stalls here
        storage.write_bytes(f"gs://{path}", data)
    gcs_emulator.reset_counts()
    claim = outdir.prepare(outdir.ClaimRequest("gs://bkt/leftovers",
                                               job=Job("PortableRunner", "j")))
    assert gcs_emulator.counts().get("objects_deleted", 0) == 0   # the launcher deletes none
    assert claim.run.leftovers == ((failed, None),)   # no marker: it did not lose a lease
    with BeamTestPipeline(runner="FnApiRunner") as pipeline:
        pipeline | ClearLeftovers(claim.run)
    counts = gcs_emulator.counts()
    assert counts["objects_deleted"] == 100 + 100 + 48 + 2
    assert counts["batch"] >= 3   # 248 objects in batches of at most 100, then the folder
    left = {p.rsplit("/", 1)[-1] for p in gcs.find("bkt/leftovers")}
    assert left == {"lease.json", "run.json"}   # this run's own
    outdir.release_lease(claim.run)
    outdir.abandon(claim.run)
    outdir.release(claim)
