"""A frame encoder inside the job: latent windows from pixel videos."""
import hashlib
import json
import os

import keras
import numpy as np
import pytest
import tensorflow as tf
from helpers import job_line, read_dataset_json, read_examples, run_job, sidecar
from input_files import solid_frames, write_frame_folder, write_manifest

import readers


@pytest.fixture(scope="module")
def encoders(tmp_path_factory):
    """The same tiny Keras encoder saved as .keras and as a SavedModel."""
    directory = tmp_path_factory.mktemp("encoders")
    keras.utils.set_random_seed(0)
    model = keras.Sequential([keras.Input((24, 32, 3)), keras.layers.Conv2D(4, 3, strides=2),
                              keras.layers.GlobalAveragePooling2D(), keras.layers.Dense(5)])
    model.save(directory / "enc.keras")
    model.export(str(directory / "enc_savedmodel"), verbose=False)
    return {"model": model, "keras": str(directory / "enc.keras"),
            "savedmodel": str(directory / "enc_savedmodel")}


@pytest.fixture(scope="module")
def videos(tmp_path_factory):
    """Two frame folders of random frames (11 and 7), the second with a missing frame."""
    directory = tmp_path_factory.mktemp("videos")
    rng = np.random.default_rng(3)
    frames = {"a": rng.integers(0, 255, (11, 24, 32, 3), dtype=np.uint8),
              "b": rng.integers(0, 255, (7, 24, 32, 3), dtype=np.uint8)}
    paths_a = write_frame_folder(directory / "a", frames["a"])
    paths_b = write_frame_folder(directory / "b", frames["b"])
    paths_b[3] = str(directory / "b" / "missing.png")
    manifest = write_manifest(directory / "m.jsonl", [
        {"video_id": "a", "frames": paths_a}, {"video_id": "b", "frames": paths_b}])
    return manifest, frames


@pytest.mark.slow
@pytest.mark.parametrize("kind, batch_size", [("keras", 1), ("keras", 3), ("savedmodel", 32)])
def test_windows_are_the_model_applied_to_the_frames_in_order(tmp_path, encoders, videos,
                                                              kind, batch_size):
    manifest, frames = videos
    run_job(manifest, tmp_path / "out", "--window", "4", "--stride", "2", "--tail", "pad",
            "--encoder", encoders[kind], "--encoder_batch_size", str(batch_size))
    expected = {vid: encoders["model"](f.astype(np.float32) / 255).numpy()
                for vid, f in frames.items()}
    expected["b"][3] = 0  # the missing frame: never fed to the model, zeros and mask 0
    examples = read_examples(tmp_path / "out")
    assert len(examples) == 5 + 3
    for e in examples:
        latents, start = expected[e["video_id"]], int(e["start"])
        real = min(4, len(latents) - start)
        np.testing.assert_allclose(e["window"][:real], latents[start:start + real], atol=1e-5)
        assert not e["window"][real:].any()
        if e["video_id"] == "b" and start <= 3 < start + 4:
            assert e["mask"][3 - start] == 0
    meta = read_dataset_json(tmp_path / "out")
    assert meta["features"][0] == {"name": "window", "shape": [4, 5], "dtype": "float32",
                                   "encoding": "float",
                                   "stored_as": meta["features"][0]["stored_as"]}
    encoder = meta["encoder"]
    assert encoder["path"] == encoders[kind] and encoder["input_shape"] == [24, 32, 3]
    assert encoder["output_shape"] == [5]
    if kind == "keras":
        with open(encoders[kind], "rb") as f:
            assert encoder["sha256"] == hashlib.sha256(f.read()).hexdigest()


@pytest.mark.slow
def test_float16_latents_halve_the_storage_and_read_as_float32(tmp_path, encoders, videos):
    manifest, frames = videos
    run_job(manifest, tmp_path / "out", "--window", "4", "--encoder", encoders["keras"],
            "--latent_dtype", "float16")
    assert read_dataset_json(tmp_path / "out")["features"][0]["dtype"] == "float16"
    batch = next(iter(readers.make_dataset(str(tmp_path / "out"), batch_size=2)))
    assert batch["window"].dtype == tf.float32 and batch["window"].shape == (2, 4, 5)
    expected = encoders["model"](frames["a"].astype(np.float32) / 255).numpy()
    for window, vid, start in zip(batch["window"].numpy(), batch["video_id"].numpy(),
                                  batch["start"].numpy(), strict=True):
        if vid == b"a":
            np.testing.assert_allclose(window, expected[start:start + 4], atol=2e-3, rtol=2e-3)


def test_models_that_cannot_serve_stop_the_job_before_any_video(tmp_path, videos, capsys):
    manifest, _ = videos
    (tmp_path / "junk.keras").write_bytes(b"not a model")
    flat = keras.Sequential([keras.Input((24, 32, 3)), keras.layers.Lambda(
        lambda x: tf.reduce_sum(x, axis=[0, 1, 2, 3]))])       # drops the batch dimension
    flat.export(str(tmp_path / "flat"), verbose=False)
    ints = keras.Sequential([keras.Input((24, 32, 3)), keras.layers.Lambda(
        lambda x: tf.cast(x, tf.int32))])
    ints.export(str(tmp_path / "ints"), verbose=False)
    for model, needle in ((tmp_path / "junk.keras", "cannot load"),
                          (tmp_path / "flat", "must keep the batch dimension"),
                          (tmp_path / "ints", "not floats")):
        last = job_line(capsys, "--input", manifest, "--output_dir", tmp_path / "out",
                        "--window", "4", "--encoder", model)
        assert "--encoder" in last and needle in last, last
        assert not (tmp_path / "out").exists()


@pytest.mark.slow
def test_a_model_failing_on_one_video_fails_only_that_video(tmp_path, videos):
    manifest, frames = videos

    class Picky(tf.Module):
        """Fails on frames as bright as video a's first frame."""
        @tf.function(input_signature=[tf.TensorSpec([None, 24, 32, 3], tf.float32)])
        def serve(self, x):
            hit = tf.reduce_any(tf.reduce_all(tf.abs(
                x - frames["a"][0].astype(np.float32) / 255) < 1e-6, axis=[1, 2, 3]))
            tf.debugging.assert_equal(hit, False, message="video a's first frame")
            return {"latent": tf.reduce_mean(x, axis=[1, 2])}

    picky = Picky()
    tf.saved_model.save(picky, str(tmp_path / "picky"),
                        signatures={"serving_default": picky.serve})
    run_job(manifest, tmp_path / "out", "--window", "4", "--encoder", str(tmp_path / "picky"),
            "--max_failure_fraction", "0.5")
    (row,) = [json.loads(line) for line in open(sidecar(tmp_path / "out", "failures"))]
    assert row["video_id"] == "a" and "the encoder failed" in row["reason"]
    assert {e["video_id"] for e in read_examples(tmp_path / "out")} == {"b"}


@pytest.mark.slow
def test_encoder_copies_of_remote_models_are_removed(tmp_path):
    import tempfile

    import fsspec
    import keras

    model = keras.Sequential([keras.Input((24, 32, 3)), keras.layers.GlobalAveragePooling2D()])
    model.save(tmp_path / "enc.keras")
    fs = fsspec.filesystem("memory")
    fs.put(str(tmp_path / "enc.keras"), "/models/enc.keras")
    write_frame_folder(tmp_path / "v", solid_frames(6))
    write_manifest(tmp_path / "m.jsonl", [{"video_id": "v", "frames": "v"}])
    before = {n for n in os.listdir(tempfile.gettempdir()) if n.startswith("encoder-")}
    run_job(str(tmp_path / "m.jsonl"), tmp_path / "out", "--window", "3",
            "--encoder", "memory://models/enc.keras")
    after = {n for n in os.listdir(tempfile.gettempdir()) if n.startswith("encoder-")}
    assert after == before
    assert len(read_examples(tmp_path / "out")) == 2
