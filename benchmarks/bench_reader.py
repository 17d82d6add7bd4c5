"""Reader throughput, side by side: the first user story's reader, ours, and a no-parse floor.

    python benchmarks/bench_reader.py --json bench_reader.json \\
        [--videos 512] [--files 8] [--repeats 5] [--work_dir DIR]

Writes a latent sample (beam_jobs.sample), cuts it into shards with beam_jobs.make_shards
(window 100, stride 50, 16 shards), then times one full epoch (batch 64, drop_remainder)
of each contender, counting windows per second:

  baseline  the user story's TFRecordReader on the input files: parse the whole video,
            then flat_map over overlapping windows, shuffle(2048), batch, prefetch
  ours      readers.make_dataset(out_dir, "train", batch_size=64) with its defaults
  floor     TFRecordDataset over the shards, batch, prefetch: reading, no parsing

Each contender gets one warm-up epoch (page cache, tf.data autotuning), then the
contenders take turns for --repeats epochs each (a, b, c, a, b, c, ...); the table
shows the median of each. Targets: ours/baseline >= 1.6, ours/floor >= 0.9.
Windows per CPU-second (user + system time of all this process's threads) is shown
too: on a shared, busy machine it moves much less than wall-clock throughput.
"""
from __future__ import annotations

import argparse
import glob
import json
import os
import statistics
import tempfile
import time
from typing import Callable

import tensorflow as tf

import readers
from beam_jobs import make_shards
from beam_jobs.sample import write_latent_sample

WINDOW, STRIDE, DIM = 100, 50, 200
BATCH = 64
NUM_SHARDS = 16
BASELINE_SHUFFLE = 2048
TARGETS = {"ours/baseline": 1.6, "ours/floor": 0.9}
AUTOTUNE = tf.data.AUTOTUNE


def baseline_dataset(files: list[str]) -> tf.data.Dataset:
    """The first user story's TFRecordReader.get_dataset, with its crashing bugs fixed.

    Fixed: the reshape to a hard-coded [832, 200] (now [-1, 200]), and the Python `if`
    on a tensor in the windowing (now tf ops only, with the tail window of align_end).
    """
    parse_spec = {"frames": tf.io.FixedLenFeature([], tf.string),
                  "recipe": tf.io.FixedLenFeature([4], tf.float32)}

    def parse(record: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor]:
        example = tf.io.parse_single_example(record, parse_spec)
        frames = tf.reshape(tf.io.parse_tensor(example["frames"], tf.float32), [-1, DIM])
        return frames, example["recipe"]

    def split_into_windows(frames: tf.Tensor, recipe: tf.Tensor) -> tf.data.Dataset:
        last = tf.shape(frames)[0] - WINDOW
        grid = tf.range(0, tf.maximum(last + 1, 0), STRIDE)  # empty when T < WINDOW
        needs_tail = tf.logical_and(last >= 0, last % STRIDE != 0)
        starts = tf.concat([grid, tf.reshape(last, [1])[:tf.cast(needs_tail, tf.int32)]], 0)
        return tf.data.Dataset.from_tensor_slices(starts).map(
            lambda start: (frames[start:start + WINDOW], recipe))

    options = tf.data.Options()
    options.deterministic = False
    return (tf.data.TFRecordDataset(files)
            .with_options(options)
            .map(parse, num_parallel_calls=AUTOTUNE)
            .flat_map(split_into_windows)
            .shuffle(BASELINE_SHUFFLE)
            .batch(BATCH, drop_remainder=True)
            .prefetch(AUTOTUNE))


def floor_dataset(shard_files: list[str]) -> tf.data.Dataset:
    return (tf.data.TFRecordDataset(shard_files, num_parallel_reads=AUTOTUNE)
            .batch(BATCH, drop_remainder=True)
            .prefetch(AUTOTUNE))


def time_epoch(dataset: tf.data.Dataset) -> dict:
    """Windows, wall and CPU seconds (all threads of this process) of one full pass.

    An iterator step hands back a batch's tensors already computed, so reading a shape
    is enough to be sure the whole batch was produced.
    """
    windows = 0
    start, cpu_start = time.perf_counter(), time.process_time()
    for batch in dataset:
        windows += tf.nest.flatten(batch)[0].shape[0]
    seconds, cpu = time.perf_counter() - start, time.process_time() - cpu_start
    return {"windows": windows, "seconds": seconds, "cpu_seconds": cpu,
            "windows_per_s": windows / seconds, "windows_per_cpu_s": windows / cpu}


def make_data(work_dir: str, videos: int, files: int) -> tuple[list[str], str]:
    """Write the latent sample and its shards; return (input files, output dir)."""
    input_files = write_latent_sample(os.path.join(work_dir, "latents"), videos=videos,
                                      files=files)
    out_dir = os.path.join(work_dir, "shards")
    make_shards.run([
        "--input", os.path.join(work_dir, "latents", "*.tfrecord"), "--output_dir", out_dir,
        "--window", str(WINDOW), "--stride", str(STRIDE), "--num_shards", str(NUM_SHARDS),
        "--overwrite"])
    return input_files, out_dir


def run_contenders(contenders: dict[str, Callable[[], tf.data.Dataset]],
                   repeats: int) -> dict[str, list[dict]]:
    """One warm-up epoch each, then `repeats` rounds of one epoch each, interleaved."""
    for name, make in contenders.items():
        run = time_epoch(make())
        print(f"warm-up {name:9s} {run['windows']:6d} windows {run['seconds']:6.2f} s",
              flush=True)
    runs: dict[str, list[dict]] = {name: [] for name in contenders}
    for r in range(repeats):
        for name, make in contenders.items():
            run = time_epoch(make())
            runs[name].append(run)
            print(f"round {r + 1} {name:9s} {run['windows_per_s']:8.0f} windows/s "
                  f"{run['windows_per_cpu_s']:8.0f} windows/cpu-s", flush=True)
    return runs


def _ratios(medians: dict[str, float]) -> dict[str, float]:
    return {"ours/baseline": medians["ours"] / medians["baseline"],
            "ours/floor": medians["ours"] / medians["floor"]}


def summarize(runs: dict[str, list[dict]]) -> dict:
    """Medians and ratios of windows/s (the targets), and of windows per CPU-second."""
    medians = {name: statistics.median(r["windows_per_s"] for r in rs)
               for name, rs in runs.items()}
    cpu_medians = {name: statistics.median(r["windows_per_cpu_s"] for r in rs)
                   for name, rs in runs.items()}
    ratios = _ratios(medians)
    return {"median_windows_per_s": medians, "ratios": ratios,
            "targets_met": {k: ratios[k] >= TARGETS[k] for k in TARGETS},
            "median_windows_per_cpu_s": cpu_medians, "cpu_ratios": _ratios(cpu_medians)}


def print_table(runs: dict[str, list[dict]], summary: dict) -> None:
    print(f"\n{'contender':10s} {'windows':>8s} {'median s':>9s} {'median win/s':>13s} "
          f"{'min':>7s} {'max':>7s} {'median win/cpu-s':>17s}")
    for name, rs in runs.items():
        rates = [r["windows_per_s"] for r in rs]
        print(f"{name:10s} {rs[0]['windows']:8d} "
              f"{statistics.median(r['seconds'] for r in rs):9.2f} "
              f"{summary['median_windows_per_s'][name]:13.0f} {min(rates):7.0f} {max(rates):7.0f} "
              f"{summary['median_windows_per_cpu_s'][name]:17.0f}")
    for key, value in summary["ratios"].items():
        verdict = "met" if summary["targets_met"][key] else "MISSED"
        print(f"{key:14s} {value:5.2f}x  (target >= {TARGETS[key]}x: {verdict}); "
              f"per CPU-second {summary['cpu_ratios'][key]:.2f}x")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--videos", type=int, default=512)
    parser.add_argument("--files", type=int, default=8)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--json", required=True, help="where the results go")
    parser.add_argument("--work_dir", default=None,
                        help="where the data is written (default: a temp dir, removed after)")
    args = parser.parse_args()

    with tempfile.TemporaryDirectory() as temp_dir:
        work_dir = args.work_dir or temp_dir
        input_files, out_dir = make_data(work_dir, args.videos, args.files)
        shard_files = sorted(glob.glob(os.path.join(out_dir, "train-*")))
        runs = run_contenders({
            "baseline": lambda: baseline_dataset(input_files),
            "ours": lambda: readers.make_dataset(out_dir, "train", batch_size=BATCH),
            "floor": lambda: floor_dataset(shard_files),
        }, args.repeats)

    summary = summarize(runs)
    print_table(runs, summary)
    with open(args.json, "w") as f:
        json.dump({"config": {"videos": args.videos, "files": args.files,
                              "repeats": args.repeats, "batch_size": BATCH, "window": WINDOW,
                              "stride": STRIDE, "num_shards": NUM_SHARDS,
                              "cpus": os.cpu_count()},
                   "runs": runs, **summary}, f, indent=2)
    print(f"wrote {args.json}")


if __name__ == "__main__":
    main()
