"""gs:// in and out, for real, against a GCS emulator started here on 127.0.0.1.

TensorFlow's own gs:// cannot reach an emulator, so the reader is tested on a local copy.
"""
import os
import socket

import fsspec
import keras
import numpy as np
import pytest

from conftest import (latent_example, read_dataset_json, read_examples, run_job, solid_frames,
                      write_frame_folder)


@pytest.fixture(scope="module")
def gcs(tmp_path_factory):
    """A bucket `bkt` on an in-memory emulator; gcsfs and Beam's gs:// both point at it."""
    from gcp_storage_emulator.server import create_server

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    server = create_server("127.0.0.1", port, in_memory=True, default_bucket="bkt")
    server.start()
    env = {"STORAGE_EMULATOR_HOST": f"http://127.0.0.1:{port}",
           "GCSFS_EXPERIMENTAL_ZB_HNS_SUPPORT": "false", "FSSPEC_GCS_TOKEN": "anon"}
    saved = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    fsspec.config.conf.setdefault("gcs", {})["token"] = "anon"
    try:
        yield fsspec.filesystem("gs", skip_instance_cache=True)
    finally:
        server.stop()
        for k, v in saved.items():
            os.environ.pop(k) if v is None else os.environ.__setitem__(k, v)


def _download(fs, remote: str, local) -> None:
    os.makedirs(local, exist_ok=True)
    for path in fs.ls(remote):
        fs.get(path, os.path.join(str(local), path.rsplit("/", 1)[-1]))


def test_latents_from_and_to_gcs(gcs, tmp_path, rng):
    videos = [rng.standard_normal((n, 3)).astype(np.float32) for n in (30, 45, 12)]
    for i, frames in enumerate(videos):
        gcs.pipe(f"bkt/latents/part-{i}.tfrecord", _tfrecord([latent_example(frames, [i, 0])]))
    run_job("gs://bkt/latents/*.tfrecord", "gs://bkt/out", "--window", "10", "--stride", "5",
            "--num_shards", "2")
    names = sorted(p.rsplit("/", 1)[-1] for p in gcs.ls("bkt/out"))
    assert names == ["dataset.json", "failures.jsonl", "train-00000-of-00002.tfrecord",
                     "train-00001-of-00002.tfrecord"]
    _download(gcs, "bkt/out", tmp_path / "copy")
    examples = read_examples(tmp_path / "copy")
    assert len(examples) == read_dataset_json(tmp_path / "copy")["splits"]["train"]["windows"]
    for e in examples:
        frames = videos[int(e["video_id"].split("-")[1].split(".")[0])]
        np.testing.assert_array_equal(e["window"], frames[e["start"]:e["start"] + 10])

    import readers
    batch = next(iter(readers.make_dataset(str(tmp_path / "copy"), batch_size=4)))
    assert batch["window"].shape == (4, 10, 3)


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
