"""The examples' datasets: the small ones they make for themselves when they are given
no `--data` (the job, beam_jobs.make_shards, which needs `pip install -e ".[beam]"`, run
on inputs written here), and the check of one given with `--data` (`checked`): that it
holds the kind of windows the example reads, refused in one line if not.

    python examples/example_data.py latent DIR     # the README's sample, cut by the job
    python examples/example_data.py fire DIR       # synthetic fire videos, cut by the job

Each returns (prints) the dataset's directory; one already there is used as it is.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
from typing import NoReturn, Optional

import numpy as np

from readers import load_spec
from readers.format import DatasetSpec

DATASET = "dataset"   # the job's output under the directory given
# What each example reads, as its refusals name it.
KINDS = {"latent": "latent windows [L, C] (the README's first command makes some)",
         "fire": "pixel windows [L, H, W, C] with one label a frame (a manifest's "
                 "`labels`, README)"}


def refuse(message: str) -> NoReturn:
    """End the example with `message` in one line, and argparse's exit status for a
    usage error (2): no traceback."""
    print(f"{os.path.basename(sys.argv[0])}: error: {message}", file=sys.stderr)
    raise SystemExit(2)


def checked(data: str, kind: str, split: str = "train",
            batch_size: Optional[int] = None) -> DatasetSpec:
    """`data`'s dataset.json, when it holds the `kind` of windows an example reads (KINDS)
    in `split`, and (`batch_size`: an example that drops a short batch) a whole batch of
    them; else `refuse`, saying what it lacks."""
    try:
        spec = load_spec(data)
    except (OSError, ValueError) as e:
        refuse(f"--data: {e}")
    lacks = _lacks(spec, kind)
    if lacks:
        refuse(f"--data {data}: {lacks}; this example reads {KINDS[kind]}")
    if split not in spec.splits or not spec.splits[split].windows:
        refuse(f"--data {data}: it has no windows in split {split!r} (its splits: "
               f"{', '.join(f'{name} {s.windows}' for name, s in spec.splits.items())})")
    if batch_size is not None and batch_size > spec.splits[split].windows:
        refuse(f"--batch_size {batch_size}: more than the {spec.splits[split].windows} "
               f"windows of split {split!r}: not one whole batch")
    return spec


def _lacks(spec: DatasetSpec, kind: str) -> str:
    """What `spec` lacks to be read by an example of `kind` (empty: nothing)."""
    shape = spec.feature("window").shape
    if kind == "latent":
        return f"its windows are pixels {list(shape)}" if len(shape) != 2 else ""
    if len(shape) != 4:
        return f"its windows are latents {list(shape)}"
    if "labels" not in [f.name for f in spec.features]:
        return "it has no labels"
    if spec.feature("labels").shape != shape[:1]:
        return f"its labels are {list(spec.feature('labels').shape)} a window"
    if not {"window", "labels"} <= set(spec.stats.get("train", {})):
        return "it has no statistics of the train split's window and labels"
    return ""


def _made(directory: str) -> tuple[str, bool]:
    """The dataset's path under `directory`, and whether it is already there."""
    out = os.path.join(directory, DATASET)
    return out, os.path.exists(os.path.join(out, "dataset.json"))


def latent_dataset(directory: str, *, videos: int = 24, frames: tuple[int, int] = (700, 900),
                   window: int = 100, stride: int = 50, seed: int = 0) -> str:
    """The latent GPT story: `beam_jobs.sample`'s latents (smooth trajectories driven by
    each video's 4-float recipe) cut into windows of `window` every `stride` frames. With
    the defaults, the dataset the README's first command makes (371 windows)."""
    out, done = _made(directory)
    if not done:
        from beam_jobs import make_shards
        from beam_jobs.sample import write_latent_sample

        inputs = os.path.join(directory, "inputs")
        write_latent_sample(inputs, videos=videos, frames=frames, seed=seed)
        make_shards.run(["--input", os.path.join(inputs, "latents-*.tfrecord"),
                         "--output_dir", out, "--window", str(window), "--stride", str(stride)])
    return out


def heat_release(length: int, rng: np.random.Generator) -> np.ndarray:
    """A fire's heat-release rate in kW, frame by frame: a rise to a peak of 300 to
    1,500 kW and a decay, over a base of 20 kW."""
    peak, at, width = rng.uniform(300, 1500), rng.uniform(0.3, 0.7) * length, length / 4
    return 20 + peak * np.exp(-(((np.arange(length) - at) / width) ** 2))


def fire_frame(hrr: float, centre: np.ndarray, size: tuple[int, int],
               rng: np.random.Generator) -> np.ndarray:
    """A dark, noisy room and an orange blob whose area grows with the heat release (its
    radius with the square root): uint8 [H, W, 3]. The label is a function of the picture,
    wherever the blob is."""
    h, w = size
    y, x = np.mgrid[:h, :w]
    radius = 1 + 0.22 * min(h, w) * np.sqrt(hrr / 1500)
    blob = np.exp(-((y - centre[0]) ** 2 + (x - centre[1]) ** 2) / (2 * radius ** 2))
    picture = 25 + rng.normal(0, 6, (h, w, 1)) + blob[..., None] * np.array([230, 130, 30])
    return np.clip(picture, 0, 255).astype(np.uint8)


def fire_dataset(directory: str, *, videos: int = 24, frames: tuple[int, int] = (30, 50),
                 size: tuple[int, int] = (32, 48), window: int = 8, stride: int = 4,
                 missing: float = 0.05, seed: int = 0) -> str:
    """The fire story in small: `videos` videos of `frames` frames (drawn) of `size`, PNG
    files listed per video in a manifest with the heat-release rate of each frame, two
    metadata values and a `fuel` (the row's own field); a `missing` fraction of the
    listed frames do not exist (the job masks them: mask 0, label 0). Cut into windows
    of `window` every `stride`, split train 0.8, validation 0.2."""
    out, done = _made(directory)
    if done:
        return out
    from PIL import Image

    from beam_jobs import make_shards

    rng = np.random.default_rng(seed)
    inputs = os.path.join(directory, "inputs")
    rows = []
    for v in range(videos):
        length = int(rng.integers(*frames))
        hrr = heat_release(length, rng)
        centre = rng.uniform(0.3, 0.7, 2) * size
        folder = os.path.join(inputs, f"fire_{v:03d}")
        os.makedirs(folder, exist_ok=True)
        paths = []
        for t in range(length):
            path = os.path.join(folder, f"{t:04d}.png")
            if rng.random() >= missing:   # else listed but never written: a missing frame
                Image.fromarray(fire_frame(hrr[t], centre, size, rng)).save(path)
            paths.append(os.path.relpath(path, inputs))
        rows.append({"video_id": f"fire_{v:03d}", "frames": paths,
                     "labels": [round(float(r), 3) for r in hrr],
                     # what a trainer selects by (readers.Select(where=...)): the
                     # experiment's metadata, and a field of its own the job keeps
                     "metadata": [float(v % 2), float(v % 3 + 1)],
                     "fuel": ("pine", "oak")[v % 2]})
    manifest = os.path.join(inputs, "fires.jsonl")
    with open(manifest, "w") as f:
        f.writelines(json.dumps(row) + "\n" for row in rows)
    make_shards.run(["--input", manifest, "--output_dir", out, "--window", str(window),
                     "--stride", str(stride), "--splits", "train=0.8,validation=0.2"])
    return out


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("kind", choices=["latent", "fire"])
    parser.add_argument("directory")
    args = parser.parse_args()
    print((latent_dataset if args.kind == "latent" else fire_dataset)(args.directory))
