"""Clips sampled at read time against plain reads of the same batches, in both readers.

    python benchmarks/bench_clips.py --json bench_clips.json [--repeats 7] [--work_dir DIR]

Builds two datasets with the job: latent windows of 100 x 200 float32 (the latent sample,
128 videos, as benchmarks/bench_reader.py) and PNG frame windows of 16 frames at 135x240
(benchmarks/pixel_sample.py, 8 videos of 48 frames). For each, the contenders read the
same batches (64 latent windows, 8 pixel windows; a seeded permutation of the split),
taking turns for --repeats rounds (the order turned every other round):

  whole        the windows as stored (no clip): the baseline
  clip L       a clip as long as the window (Clip(L)): the cost of the clip machinery alone
  clip L/2     Clip(L/2), random offsets: half the frames, the rest skipped
  clip L/2 /2  Clip(L/2, step=2): every other frame of the whole window
  whole, then ... cut in numpy   (readers.numpy) whole windows read, then the same clips
               cut by fancy indexing: what a trainer writes without clips

readers.numpy reads each batch with `WindowSource.read_batch` in this process;
tf.data reads one epoch of `readers.make_dataset(..., shuffle=False)`. The table
shows the median windows/s and each clip's ratio to `whole` of the same reader.
"""
from __future__ import annotations

import argparse
import functools
import json
import os
import statistics
import sys
import tempfile
import time
from typing import Callable

import numpy as np

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(REPO, "benchmarks"))

from bench_reader import make_data  # noqa: E402
from pixel_sample import write_frame_manifest  # noqa: E402

import readers  # noqa: E402
from beam_jobs import make_shards  # noqa: E402
from readers.clips import Clip  # noqa: E402
from readers.numpy import WindowSource  # noqa: E402


def pixel_data(work_dir: str) -> str:
    manifest = write_frame_manifest(os.path.join(work_dir, "frames"), videos=8, frames=48)
    out_dir = os.path.join(work_dir, "png")
    make_shards.run(["--input", manifest, "--output_dir", out_dir, "--window", "16",
                     "--stride", "4", "--frame_size", "135x240", "--frame_encoding", "png",
                     "--num_shards", "4", "--overwrite"])
    return out_dir


def clips(length: int) -> dict[str, Clip | None]:
    return {"whole": None, f"clip {length}": Clip(length),
            f"clip {length // 2}": Clip(length // 2),
            f"clip {length // 2} /2": Clip(length // 2, step=2)}


def contenders(length: int, reader: str) -> dict[str, Callable[[str, int], float]]:
    """name -> epoch(path, batch) -> windows/s."""
    if reader == "tf.data":
        return {name: functools.partial(tf_epoch, clip=clip)
                for name, clip in clips(length).items()}
    made = {name: functools.partial(numpy_epoch, clip=clip)
            for name, clip in clips(length).items()}
    for name in (f"clip {length // 2}", f"clip {length // 2} /2"):
        made[f"whole, then {name} cut in numpy"] = functools.partial(
            numpy_epoch, clip=clips(length)[name], cut=True)
    return made


def cut_after(values: dict, clip: Clip, offsets: np.ndarray) -> dict:
    """What a trainer writes without clips: whole windows read, then cut."""
    frames = offsets[:, None] + np.arange(0, clip.span, clip.step)
    rows = np.arange(len(offsets))[:, None]
    return {name: values[name][rows, frames] if name in ("window", "mask", "labels")
            else values[name] for name in values}


def numpy_epoch(path: str, batch: int, clip: Clip | None, cut: bool = False) -> float:
    source = WindowSource(path, "train", clip=None if cut else clip)
    order = np.random.default_rng(0).permutation(len(source))
    steps = [order[i:i + batch] for i in range(0, len(order) - batch + 1, batch)]
    window = source.spec.window.length
    start = time.perf_counter()
    for step in steps:
        values = source.read_batch(step)
        if cut:
            cut_after(values, clip, clip.offsets(window, step, 0))
    return len(steps) * batch / (time.perf_counter() - start)


def tf_epoch(path: str, batch: int, clip: Clip | None) -> float:
    ds = readers.make_dataset(path, "train", batch, shuffle=False, clip=clip)
    start, windows = time.perf_counter(), 0
    for values in ds:
        windows += int(values["mask"].shape[0])
    return windows / (time.perf_counter() - start)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--work_dir", default=None)
    parser.add_argument("--json", default=None)
    args = parser.parse_args()
    work_dir = args.work_dir or tempfile.mkdtemp(prefix="bench_clips_")
    datasets = {"latent 100x200 float32, batch 64": (make_data(work_dir, 128, 8)[1], 100, 64),
                "png 16x135x240, batch 8": (pixel_data(work_dir), 16, 8)}
    results = {}
    for label, (path, length, batch) in datasets.items():
        for reader in ("readers.numpy", "tf.data"):
            made = contenders(length, reader)
            runs: dict[str, list[float]] = {name: [] for name in made}
            for epoch in made.values():     # a warm-up each
                epoch(path, batch)
            for round_ in range(args.repeats):   # the order turned every other round
                for name in (list(made) if round_ % 2 else list(made)[::-1]):
                    runs[name].append(made[name](path, batch))
            results[f"{label}, {reader}"] = {name: statistics.median(v) for name, v in runs.items()}
    print("| dataset, reader | contender | windows/s | vs whole |\n|---|---|---|---|")
    for row, medians in results.items():
        for name, value in medians.items():
            print(f"| {row} | {name} | {value:,.0f} | {value / medians['whole']:.2f}x |")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=1)


if __name__ == "__main__":
    main()
