"""Encoder throughput: the job with --encoder against the same model in a plain loop.

    python benchmarks/bench_encoder.py --json bench_encoder.json \\
        [--videos 16] [--frames 96] [--batch_size 32] [--repeats 3] [--work_dir DIR]

Writes --videos frame folders of --frames 540x960 JPEGs (benchmarks/pixel_sample.py) and
a small convolutional Keras encoder (three stride-2 convolutions, 64-d latents) for
135x240 frames, then times in turns, as subprocesses (so that both wall times include
Python and TensorFlow start-up):

  loop  `python benchmarks/bench_encoder.py --loop_only ...`: for each video, Pillow
        decodes each frame and resizes it to 240x135 (LANCZOS); every --batch_size frames
        the model runs on the batch scaled to [0, 1]; the latents are kept in memory.
  job   `python -m beam_jobs.make_shards --input MANIFEST --output_dir DIR --window 16
        --stride 8 --frame_size 135x240 --encoder MODEL --encoder_batch_size B`: the same
        decoding, resizing and model calls, plus windowing, shuffling and writing shards.

Frames per second are input frames / wall seconds; medians of --repeats. Target:
job / loop >= 0.8.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile

from pixel_sample import frame_paths, write_frame_manifest
from process_tree import run_tree

FRAME_SIZE = (135, 240)
TARGET = 0.8


def build_model(path: str) -> None:
    import keras

    keras.utils.set_random_seed(0)
    model = keras.Sequential([
        keras.Input((*FRAME_SIZE, 3)),
        keras.layers.Conv2D(32, 3, strides=2, activation="relu"),
        keras.layers.Conv2D(64, 3, strides=2, activation="relu"),
        keras.layers.Conv2D(64, 3, strides=2, activation="relu"),
        keras.layers.GlobalAveragePooling2D(),
        keras.layers.Dense(64)])
    model.save(path)


def plain_loop(manifest: str, model_path: str, batch_size: int) -> int:
    """Decode, resize and encode every frame of the manifest; return the frame count."""
    import keras
    import numpy as np
    from PIL import Image

    model = keras.saving.load_model(model_path, compile=False)
    latents, batch, frames = [], [], 0
    with open(manifest) as f:
        rows = [json.loads(line) for line in f]
    for row in rows:
        folder = os.path.join(os.path.dirname(manifest), row["frames"])
        for path in frame_paths(folder):
            image = Image.open(path).convert("RGB").resize(FRAME_SIZE[::-1],
                                                           Image.Resampling.LANCZOS)
            batch.append(np.asarray(image))
            frames += 1
            if len(batch) == batch_size:
                latents.append(keras.ops.convert_to_numpy(
                    model(np.stack(batch).astype(np.float32) / 255, training=False)))
                batch = []
        if batch:   # the job encodes each video's frames on their own, too
            latents.append(keras.ops.convert_to_numpy(
                model(np.stack(batch).astype(np.float32) / 255, training=False)))
            batch = []
    return frames


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--videos", type=int, default=16)
    parser.add_argument("--frames", type=int, default=96, help="frames per video")
    parser.add_argument("--batch_size", type=int, default=32)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--json", help="where the results go (required)")
    parser.add_argument("--work_dir", default=None)
    parser.add_argument("--loop_only", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--manifest", help=argparse.SUPPRESS)
    parser.add_argument("--model", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.loop_only:
        print("LOOP_FRAMES", plain_loop(args.manifest, args.model, args.batch_size))
        return
    if not args.json:
        parser.error("--json is required")
    work_dir = args.work_dir or tempfile.mkdtemp(prefix="bench_encoder-")
    manifest = write_frame_manifest(work_dir, args.videos, args.frames)
    model = os.path.join(work_dir, "encoder.keras")
    build_model(model)
    frames = args.videos * args.frames
    commands = {
        "loop": [sys.executable, os.path.abspath(__file__), "--loop_only", "--manifest",
                 manifest, "--model", model, "--batch_size", str(args.batch_size)],
        "job": [sys.executable, "-m", "beam_jobs.make_shards", "--input", manifest,
                "--output_dir", os.path.join(work_dir, "out"), "--window", "16", "--stride",
                "8", "--frame_size", "x".join(map(str, FRAME_SIZE)), "--encoder", model,
                "--encoder_batch_size", str(args.batch_size), "--overwrite"],
    }
    runs: dict[str, list[float]] = {name: [] for name in commands}
    for round_ in range(args.repeats):
        for name, command in commands.items():
            result = run_tree(command, os.path.join(work_dir, f"{name}-{round_}.log"))
            runs[name].append(frames / result["wall_s"])
            print(f"round {round_ + 1} {name:4s} {runs[name][-1]:8.1f} frames/s "
                  f"({result['wall_s']:.1f} s)", flush=True)
    medians = {name: statistics.median(v) for name, v in runs.items()}
    ratio = medians["job"] / medians["loop"]
    print(f"\n{frames} frames ({args.videos} videos x {args.frames}), batch {args.batch_size}")
    for name, value in medians.items():
        print(f"{name:5s} median {value:8.1f} frames/s")
    print(f"job/loop {ratio:.2f}x (target >= {TARGET}x: {'met' if ratio >= TARGET else 'missed'})")
    with open(args.json, "w") as f:
        json.dump({"frames": frames, "batch_size": args.batch_size, "runs": runs,
                   "median_frames_per_s": medians, "ratio_job_loop": ratio}, f, indent=2)


if __name__ == "__main__":
    main()
