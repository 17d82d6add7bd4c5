"""Helpers shared by the tests: latent TFRecords written here, and job runs."""
from __future__ import annotations

import json
import os
from typing import Optional, Sequence

import numpy as np
import pytest
import tensorflow as tf

from beam_jobs import make_shards


def latent_example(frames: np.ndarray, recipe: Optional[Sequence[float]] = None,
                   video_id: Optional[str] = None, float_list: bool = False) -> bytes:
    """One record of the first user story's format (or a FloatList sequence)."""
    feature = {}
    if float_list:
        feature["frames"] = tf.train.Feature(float_list=tf.train.FloatList(value=frames.ravel()))
    else:
        feature["frames"] = tf.train.Feature(bytes_list=tf.train.BytesList(
            value=[tf.io.serialize_tensor(frames).numpy()]))
    if recipe is not None:
        feature["recipe"] = tf.train.Feature(float_list=tf.train.FloatList(value=recipe))
    if video_id is not None:
        feature["vid"] = tf.train.Feature(bytes_list=tf.train.BytesList(value=[video_id.encode()]))
    return tf.train.Example(features=tf.train.Features(feature=feature)).SerializeToString()


def write_records(path: str, records: Sequence[bytes], compression: str = "") -> str:
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with tf.io.TFRecordWriter(path, options=compression or None) as w:
        for r in records:
            w.write(r)
    return path


def random_videos(rng: np.random.Generator, count: int, lengths=(20, 60), dim: int = 3,
                  dtype=np.float32) -> list[tuple[np.ndarray, np.ndarray]]:
    return [(rng.standard_normal((int(rng.integers(*lengths)), dim)).astype(dtype),
             rng.random(4).astype(np.float32)) for _ in range(count)]


def write_videos(directory: str, videos, files: int = 2, **kwargs) -> list[str]:
    """Spread (frames, recipe) videos round-robin over `files` TFRecord files."""
    per_file = [[] for _ in range(files)]
    for i, (frames, recipe) in enumerate(videos):
        per_file[i % files].append(latent_example(frames, recipe, **kwargs))
    return [write_records(os.path.join(directory, f"lat-{i}.tfrecord"), recs)
            for i, recs in enumerate(per_file)]


def run_job(input_glob: str, output_dir: str, *extra: str) -> None:
    make_shards.run(["--input", input_glob, "--output_dir", str(output_dir), *extra])


def read_dataset_json(output_dir) -> dict:
    with open(os.path.join(output_dir, "dataset.json")) as f:
        return json.load(f)


def read_examples(output_dir, split: str = "train") -> list[dict]:
    """Every example of a split, in shard order, parsed to numpy."""
    meta = read_dataset_json(output_dir)
    spec = {f["name"]: f for f in meta["features"]}
    compression = "GZIP" if meta["compression"] == "gzip" else ""
    out = []
    for shard in meta["splits"][split]["shards"]:
        path = os.path.join(output_dir, shard["file"])
        for record in tf.data.TFRecordDataset(path, compression_type=compression):
            ex = tf.train.Example.FromString(record.numpy()).features.feature
            row = {}
            for name, f in spec.items():
                if f["encoding"] == "float":
                    row[name] = np.array(ex[name].float_list.value, np.float32).reshape(f["shape"])
                elif f["encoding"] == "int64":
                    row[name] = np.array(ex[name].int64_list.value).reshape(f["shape"])
                elif f["encoding"] == "raw":
                    row[name] = np.frombuffer(ex[name].bytes_list.value[0],
                                              np.dtype(f["dtype"]).newbyteorder("<")
                                              ).reshape(f["shape"])
                else:
                    row[name] = ex[name].bytes_list.value[0].decode()
            out.append(row)
    return out


@pytest.fixture
def rng() -> np.random.Generator:
    return np.random.default_rng(1234)
