"""Encoder throughput: the job with --encoder against the same model in a plain loop.

    python benchmarks/bench_encoder.py --json bench_encoder.json [--kinds keras,onnx] \\
        [--videos 16] [--frames 96] [--batch_size 32] [--repeats 3] [--work_dir DIR]

Writes --videos frame folders of --frames 540x960 JPEGs (benchmarks/pixel_sample.py) and
a small convolutional encoder (three stride-2 convolutions, 64-d latents) for 135x240
frames in each kind: a Keras model, and an ONNX graph with the same layers (channels
first, run with onnxruntime). Then times in turns, as subprocesses (so that every wall
time includes Python's and the libraries' start-up):

  loop  `python benchmarks/bench_encoder.py --loop_only ...`: for each video, Pillow
        decodes each frame and resizes it to 240x135 (LANCZOS); every --batch_size frames
        the model runs on the batch scaled to [0, 1] (Keras directly; onnxruntime's
        InferenceSession.run on the batch made channels-first); the latents are kept.
  job   `python -m beam_jobs.make_shards --input MANIFEST --output_dir DIR --window 16
        --stride 8 --frame_size 135x240 --encoder MODEL --encoder_batch_size B`: the same
        decoding, resizing and model calls, plus windowing, shuffling and writing shards.

Frames per second are input frames / wall seconds; medians of --repeats. Targets:
job / loop >= 0.8 for Keras, >= 0.85 for ONNX.
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
TARGETS = {"keras": 0.8, "onnx": 0.85}


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


def build_onnx_model(path: str) -> None:
    """The Keras model's layers as an ONNX graph (channels first), random weights."""
    import numpy as np
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(0)
    nodes, weights, previous, channels = [], [], "x", 3
    for i, out in enumerate((32, 64, 64)):
        weights += [numpy_helper.from_array(rng.standard_normal(
            (out, channels, 3, 3)).astype(np.float32) * 0.1, f"w{i}"),
            numpy_helper.from_array(np.zeros(out, np.float32), f"b{i}")]
        nodes += [helper.make_node("Conv", [previous, f"w{i}", f"b{i}"], [f"c{i}"],
                                   strides=[2, 2]),
                  helper.make_node("Relu", [f"c{i}"], [f"r{i}"])]
        previous, channels = f"r{i}", out
    weights += [numpy_helper.from_array(rng.standard_normal((64, 64)).astype(np.float32) * 0.1,
                                        "dense"),
                numpy_helper.from_array(np.zeros(64, np.float32), "dense_b")]
    nodes += [helper.make_node("GlobalAveragePool", [previous], ["pooled"]),
              helper.make_node("Flatten", ["pooled"], ["flat"]),
              helper.make_node("Gemm", ["flat", "dense", "dense_b"], ["latent"])]
    graph = helper.make_graph(
        nodes, "encoder",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 3, *FRAME_SIZE])],
        [helper.make_tensor_value_info("latent", TensorProto.FLOAT, ["batch", 64])], weights)
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), path)


def _model(kind: str, path: str):
    """A function float32 frames [B, H, W, C] in [0, 1] -> latents, in its own library."""
    import numpy as np

    if kind == "onnx":
        import onnxruntime as ort
        session = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
        return lambda x: session.run(None, {"x": np.ascontiguousarray(
            x.transpose(0, 3, 1, 2))})[0]
    import keras
    model = keras.saving.load_model(path, compile=False)
    return lambda x: keras.ops.convert_to_numpy(model(x, training=False))


def plain_loop(manifest: str, kind: str, model_path: str, batch_size: int) -> int:
    """Decode, resize and encode every frame of the manifest; return the frame count."""
    import numpy as np
    from PIL import Image

    model = _model(kind, model_path)
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
                latents.append(model(np.stack(batch).astype(np.float32) / 255))
                batch = []
        if batch:   # the job encodes each video's frames on their own, too
            latents.append(model(np.stack(batch).astype(np.float32) / 255))
            batch = []
    return frames


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--kinds", default="keras,onnx")
    parser.add_argument("--videos", type=int, default=16)
    parser.add_argument("--frames", type=int, default=96, help="frames per video")
    parser.add_argument("--batch_size", type=int, default=32)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--json", help="where the results go (required)")
    parser.add_argument("--work_dir", default=None)
    parser.add_argument("--loop_only", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--kind", help=argparse.SUPPRESS)
    parser.add_argument("--manifest", help=argparse.SUPPRESS)
    parser.add_argument("--model", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.loop_only:
        print("LOOP_FRAMES", plain_loop(args.manifest, args.kind, args.model, args.batch_size))
        return
    if not args.json:
        parser.error("--json is required")
    work_dir = args.work_dir or tempfile.mkdtemp(prefix="bench_encoder-")
    manifest = write_frame_manifest(work_dir, args.videos, args.frames)
    frames = args.videos * args.frames
    commands = {}
    for kind in args.kinds.split(","):
        model = os.path.join(work_dir, f"encoder.{kind}")
        (build_onnx_model if kind == "onnx" else build_model)(model)
        layout = ["--encoder_layout", "channels_first"] if kind == "onnx" else []
        commands[f"loop {kind}"] = [
            sys.executable, os.path.abspath(__file__), "--loop_only", "--kind", kind,
            "--manifest", manifest, "--model", model, "--batch_size", str(args.batch_size)]
        commands[f"job {kind}"] = [
            sys.executable, "-m", "beam_jobs.make_shards", "--input", manifest,
            "--output_dir", os.path.join(work_dir, f"out-{kind}"), "--window", "16",
            "--stride", "8", "--frame_size", "x".join(map(str, FRAME_SIZE)), "--encoder",
            model, "--encoder_batch_size", str(args.batch_size), "--overwrite", *layout]
    runs: dict[str, list[float]] = {name: [] for name in commands}
    for round_ in range(args.repeats):
        for name, command in commands.items():
            log = os.path.join(work_dir, f"{name}-{round_}.log".replace(" ", "_"))
            result = run_tree(command, log)
            runs[name].append(frames / result["wall_s"])
            print(f"round {round_ + 1} {name:10s} {runs[name][-1]:8.1f} frames/s "
                  f"({result['wall_s']:.1f} s)", flush=True)
    medians = {name: statistics.median(v) for name, v in runs.items()}
    ratios = {kind: medians[f"job {kind}"] / medians[f"loop {kind}"]
              for kind in args.kinds.split(",")}
    print(f"\n{frames} frames ({args.videos} videos x {args.frames}), batch {args.batch_size}")
    for name, value in medians.items():
        print(f"{name:10s} median {value:8.1f} frames/s")
    for kind, ratio in ratios.items():
        print(f"job/loop {kind}: {ratio:.2f}x (target >= {TARGETS[kind]}x: "
              f"{'met' if ratio >= TARGETS[kind] else 'missed'})")
    with open(args.json, "w") as f:
        json.dump({"frames": frames, "batch_size": args.batch_size, "runs": runs,
                   "median_frames_per_s": medians, "ratios_job_loop": ratios}, f, indent=2)


if __name__ == "__main__":
    main()
