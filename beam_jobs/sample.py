"""Write a small sample input: latent sequences as serialized-tensor records
(docs/format.md).

    python -m beam_jobs.sample sample/ [--videos 24] [--files 3]

Each record is one video: `frames`, a tf.io.serialize_tensor of float32 [T, 200] (T drawn
uniformly from 700 to 899; the story's videos have 832), and `recipe`, 4 floats in [0, 1).

The latents have structure in time, so that a model can learn to predict the next one
(examples/latent_gpt_torch.py does): each video is a smooth trajectory, a sum of
`MODES` sinusoids projected to the channels by one fixed matrix, plus small white noise
(std `NOISE`), each channel about unit variance. The recipe drives the trajectory:
recipe[0] its tempo (the modes' periods, 160 frames down to 40), recipe[1] how the
modes' loudness tilts from slow to fast, recipe[2] the weight of a slow drift, recipe[3]
the modes' phases; each video adds random phases of its own, so its frames still say
where it is. The lag-1 autocorrelation of the stored latents is about 0.98 (white noise,
what this wrote before: about 0).

Written by hand with readers.format (the bytes TensorFlow writes, a test checks), so that
the job's install, `[beam]`, needs no TensorFlow to make its sample.
"""
from __future__ import annotations

import argparse
import contextlib
import os

import numpy as np

from readers.format import ExampleEncoder, FeatureSpec, tfrecord
from readers.format.numbers import whole_number_type
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


MODES = 8         # sinusoids a video's trajectory is the sum of
NOISE = 0.1       # std of the white noise on each latent (the trajectory's is about 1)


def trajectory(recipe: np.ndarray, length: int, projection: np.ndarray,
               phases: np.ndarray) -> np.ndarray:
    """A video's smooth part, float64 [length, dim]: `MODES` sinusoids whose tempo,
    loudness, drift and phase the recipe sets (the module's docstring), projected by
    `projection` [MODES + 1, dim]; each channel has about unit variance."""
    tempo, tilt, drift, phase = (float(r) for r in recipe)
    periods = (160 - 120 * tempo) * np.linspace(1.0, 1.5, MODES)   # frames
    loudness = 1 + (2 * tilt - 1) * np.linspace(-0.8, 0.8, MODES)  # slow or fast modes
    t = np.arange(length)[:, None]
    waves = np.sin(2 * np.pi * t / periods + 2 * np.pi * phase * np.arange(1, MODES + 1)
                   + phases) * loudness * np.sqrt(2 / np.mean(loudness ** 2))
    slow = np.sin(2 * np.pi * t / 1000 + phases[:1]) * 2 * drift     # a drift over ~1000
    return np.concatenate([waves, slow], axis=1) @ projection


def write_latent_sample(directory: str, videos: int = 24, files: int = 3, dim: int = 200,
                        frames: tuple[int, int] = (700, 900), seed: int = 0) -> list[str]:
    """Write `videos` records over `files` TFRecord files; return their paths.
    Each video has T frames, T drawn uniformly from [frames[0], frames[1]); its latents
    are `trajectory(recipe, ...)` plus `NOISE` times white noise (deterministic in
    `seed`; the lengths and recipes those of the sample before it had structure)."""
    rng = np.random.default_rng(seed)
    # the shape of every video's trajectory in the channels, and each video's own phases:
    # streams of their own, so that `rng` draws what it always drew (T, noise, recipe)
    shapes = np.random.default_rng([seed, 1])
    projection = shapes.standard_normal((MODES + 1, dim)) / np.sqrt(MODES + 1)
    os.makedirs(directory, exist_ok=True)
    paths = [os.path.join(directory, f"latents-{i:03d}.tfrecord") for i in range(files)]
    encode = ExampleEncoder(FEATURES)
    with contextlib.ExitStack() as stack:
        writers = [stack.enter_context(open(p, "wb")) for p in paths]
        for v in range(videos):
            noise = rng.standard_normal((int(rng.integers(*frames)), dim), dtype=np.float32)
            recipe = rng.random(4, dtype=np.float32)
            phases = shapes.uniform(0, 2 * np.pi, MODES)
            sequence = (trajectory(recipe, len(noise), projection, phases)
                        + NOISE * noise).astype(np.float32)
            example = encode({"frames": serialize_tensor(sequence), "recipe": recipe})
            writers[v % files].write(tfrecord.frame(example))
    return paths


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m beam_jobs.sample",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("directory", help="where the TFRecord files go (created if needed)")
    parser.add_argument("--videos", type=whole_number_type(1), default=24,
                        help="videos (records) in all (default: %(default)s)")
    parser.add_argument("--files", type=whole_number_type(1), default=3,
                        help="TFRecord files the videos are spread over, round-robin "
                             "(default: %(default)s)")
    args = parser.parse_args()
    for path in write_latent_sample(args.directory, args.videos, args.files):
        print(path)


if __name__ == "__main__":
    main()
