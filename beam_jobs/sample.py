"""Write a small sample input: latent sequences as serialized-tensor records
(docs/format.md).

    python -m beam_jobs.sample sample/ [--videos 24] [--files 3]

Each record is one video: `frames`, a tf.io.serialize_tensor of float32 [T, 200] (T drawn
uniformly from 700 to 899; the story's videos have 832), and `recipe`, 4 floats.

Written by hand with readers.format (the bytes TensorFlow writes, a test checks), so that
the job's install, `[beam]`, needs no TensorFlow to make its sample.
"""
from __future__ import annotations

import argparse
import contextlib
import os

import numpy as np

from readers.format import FeatureSpec, encode_example, tfrecord
from readers.format.wire import field, varint

FEATURES = [FeatureSpec("frames", (), "string", "bytes"),
            FeatureSpec("recipe", (4,), "float32", "float")]


def serialize_tensor(array: np.ndarray) -> bytes:
    """`tf.io.serialize_tensor(array)` of a float32 array: a TensorProto of its dtype
    (DT_FLOAT, field 1), shape (field 2: a Dim, field 2, of size field 1 per axis) and
    little-endian content (field 4)."""
    shape = b"".join(field(2, b"\x08" + varint(size)) for size in array.shape)
    return (b"\x08\x01" + field(2, shape)
            + field(4, np.ascontiguousarray(array, "<f4").tobytes()))


def write_latent_sample(directory: str, videos: int = 24, files: int = 3, dim: int = 200,
                        frames: tuple[int, int] = (700, 900), seed: int = 0) -> list[str]:
    """Write `videos` records over `files` TFRecord files; return their paths.
    Each video has T frames, T drawn uniformly from [frames[0], frames[1])."""
    rng = np.random.default_rng(seed)
    os.makedirs(directory, exist_ok=True)
    paths = [os.path.join(directory, f"latents-{i:03d}.tfrecord") for i in range(files)]
    with contextlib.ExitStack() as stack:
        writers = [stack.enter_context(open(p, "wb")) for p in paths]
        for v in range(videos):
            sequence = rng.standard_normal((int(rng.integers(*frames)), dim), dtype=np.float32)
            recipe = rng.random(4, dtype=np.float32)
            example = encode_example(FEATURES, {"frames": serialize_tensor(sequence),
                                                "recipe": recipe})
            writers[v % files].write(tfrecord.frame(example))
    return paths


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m beam_jobs.sample",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("directory", help="where the TFRecord files go (created if needed)")
    parser.add_argument("--videos", type=int, default=24,
                        help="videos (records) in all (default: %(default)s)")
    parser.add_argument("--files", type=int, default=3,
                        help="TFRecord files the videos are spread over, round-robin "
                             "(default: %(default)s)")
    args = parser.parse_args()
    if args.videos < 1 or args.files < 1:
        parser.error("--videos and --files must be at least 1")
    for path in write_latent_sample(args.directory, args.videos, args.files):
        print(path)


if __name__ == "__main__":
    main()
