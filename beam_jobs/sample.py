"""Write a small sample input: latent sequences in the first user story's format.

    python -m beam_jobs.sample sample/ [--videos 24] [--files 3]

Each record is one video: `frames`, a tf.io.serialize_tensor of float32 [T, 200]
(T varying around 832), and `recipe`, 4 floats.
"""
from __future__ import annotations

import argparse
import os

import numpy as np


def write_latent_sample(directory: str, videos: int = 24, files: int = 3, dim: int = 200,
                        frames: tuple[int, int] = (700, 900), seed: int = 0) -> list[str]:
    """Write `videos` records over `files` TFRecord files; return their paths."""
    import tensorflow as tf

    rng = np.random.default_rng(seed)
    os.makedirs(directory, exist_ok=True)
    paths = [os.path.join(directory, f"latents-{i:03d}.tfrecord") for i in range(files)]
    writers = [tf.io.TFRecordWriter(p) for p in paths]
    for v in range(videos):
        sequence = rng.standard_normal((int(rng.integers(*frames)), dim), dtype=np.float32)
        recipe = rng.random(4, dtype=np.float32)
        example = tf.train.Example(features=tf.train.Features(feature={
            "frames": tf.train.Feature(bytes_list=tf.train.BytesList(
                value=[tf.io.serialize_tensor(sequence).numpy()])),
            "recipe": tf.train.Feature(float_list=tf.train.FloatList(value=recipe)),
        }))
        writers[v % files].write(example.SerializeToString())
    for w in writers:
        w.close()
    return paths


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m beam_jobs.sample", description=__doc__)
    parser.add_argument("directory")
    parser.add_argument("--videos", type=int, default=24)
    parser.add_argument("--files", type=int, default=3)
    args = parser.parse_args()
    for path in write_latent_sample(args.directory, args.videos, args.files):
        print(path)


if __name__ == "__main__":
    main()
