"""Pixel datasets per frame encoding (raw, png, jpeg): bytes on disk, job time, reader speed.

    python benchmarks/bench_pixels_reader.py --json bench_pixels_reader.json \\
        [--videos 8] [--frames 48] [--repeats 5] [--encodings raw,png,jpeg] [--work_dir DIR]

Writes --videos frame folders of --frames 540x960 JPEGs (benchmarks/pixel_sample.py),
then for each encoding runs, in a subprocess,
`python -m beam_jobs.make_shards --input MANIFEST --output_dir DIR --window 16 --stride 8
--frame_size 270x480 --frame_encoding ENCODING --num_shards 4 --overwrite` and notes its
wall time (Python, TF and Beam start-up included) and the bytes of its shards.

Then it reads each dataset with `readers.make_dataset(DIR, batch_size=8)` (its defaults:
shuffled, drop_remainder, all features): one warm-up epoch each, then --repeats rounds of
one epoch each, the encodings taking turns. The table shows the median windows per
second and frames per second (16 a window: for png and jpeg, images decoded per second),
windows per CPU-second (user + system, all of this process's threads), the seconds
to the first batch (iterator start-up and shuffle buffer fill, part of the epoch), and
per epoch the cores this process kept busy and those other processes of the machine did.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

import psutil
import tensorflow as tf
from pixel_sample import frame_bytes, write_frame_manifest

import readers

WINDOW, STRIDE = 16, 8
FRAME_SIZE = "270x480"
NUM_SHARDS = 4
BATCH = 8
ENCODINGS = ("raw", "png", "jpeg")
REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MB = 2**20


def run_job(manifest: str, output_dir: str, encoding: str, log_path: str) -> dict:
    """Run the job once; its wall time, windows and shard bytes."""
    command = [sys.executable, "-m", "beam_jobs.make_shards", "--input", manifest,
               "--output_dir", output_dir, "--window", str(WINDOW), "--stride", str(STRIDE),
               "--frame_size", FRAME_SIZE, "--frame_encoding", encoding,
               "--num_shards", str(NUM_SHARDS), "--overwrite"]
    with open(log_path, "w") as log:
        start = time.perf_counter()
        returncode = subprocess.call(command, cwd=REPO, stdout=log, stderr=subprocess.STDOUT)
        wall = time.perf_counter() - start
    if returncode:
        with open(log_path) as log:
            tail = "".join(log.readlines()[-20:])
        raise RuntimeError(f"job exited with {returncode}: {' '.join(command)}\n{tail}")
    with open(os.path.join(output_dir, "dataset.json")) as f:
        split = json.load(f)["splits"]["train"]
    nbytes = sum(os.path.getsize(os.path.join(output_dir, s["file"])) for s in split["shards"])
    return {"wall_s": wall, "windows": split["windows"], "shard_bytes": nbytes}


def _busy_cpu_s() -> float:
    """CPU seconds all processes of the machine have used, all cores together."""
    t = psutil.cpu_times()
    return sum(t) - t.idle - getattr(t, "iowait", 0.0)


def time_epoch(dataset: tf.data.Dataset) -> dict:
    """Windows, wall and CPU seconds of one full pass (a batch's shape: it is computed),
    and the seconds to the first batch (iterator start-up, shuffle buffer fill)."""
    windows, first = 0, None
    start, cpu_start, busy_start = time.perf_counter(), time.process_time(), _busy_cpu_s()
    for batch in dataset:
        windows += batch["window"].shape[0]
        if first is None:
            first = time.perf_counter() - start
    seconds, cpu = time.perf_counter() - start, time.process_time() - cpu_start
    others = max(0.0, _busy_cpu_s() - busy_start - cpu)
    return {"windows": windows, "seconds": seconds, "cpu_seconds": cpu,
            "others_cpu_s": others, "first_batch_s": first, "windows_per_s": windows / seconds,
            "frames_per_s": windows * WINDOW / seconds, "windows_per_cpu_s": windows / cpu}


def read_rounds(out_dirs: dict[str, str], repeats: int) -> dict[str, list[dict]]:
    """One warm-up epoch each, then `repeats` rounds of one epoch each, interleaved."""
    for name, out_dir in out_dirs.items():
        run = time_epoch(readers.make_dataset(out_dir, batch_size=BATCH))
        print(f"warm-up {name:5s} {run['windows']:5d} windows {run['seconds']:6.2f} s",
              flush=True)
    runs: dict[str, list[dict]] = {name: [] for name in out_dirs}
    for r in range(repeats):
        for name, out_dir in out_dirs.items():
            run = time_epoch(readers.make_dataset(out_dir, batch_size=BATCH))
            runs[name].append(run)
            print(f"round {r + 1} {name:5s} {run['windows_per_s']:7.1f} windows/s "
                  f"{run['frames_per_s']:7.0f} frames/s {run['windows_per_cpu_s']:7.1f} "
                  f"windows/cpu-s, {run['cpu_seconds'] / run['seconds']:.2f} cores busy, "
                  f"others {run['others_cpu_s'] / run['seconds']:.2f} cores", flush=True)
    return runs


def summarize(jobs: dict[str, dict], runs: dict[str, list[dict]]) -> dict:
    return {name: {"shard_bytes": jobs[name]["shard_bytes"],
                   "bytes_per_frame": jobs[name]["shard_bytes"] / (jobs[name]["windows"] * WINDOW),
                   "job_wall_s": jobs[name]["wall_s"], "windows": jobs[name]["windows"],
                   "median_windows_per_s": statistics.median(r["windows_per_s"] for r in rs),
                   "median_frames_per_s": statistics.median(r["frames_per_s"] for r in rs),
                   "median_windows_per_cpu_s": statistics.median(r["windows_per_cpu_s"]
                                                                 for r in rs),
                   "median_cores_busy": statistics.median(r["cpu_seconds"] / r["seconds"]
                                                          for r in rs),
                   "max_others_cores": max(r["others_cpu_s"] / r["seconds"] for r in rs),
                   "median_epoch_s": statistics.median(r["seconds"] for r in rs),
                   "median_first_batch_s": statistics.median(r["first_batch_s"] for r in rs)}
            for name, rs in runs.items()}


def print_table(summary: dict, frames: int, input_bytes: int) -> None:
    print(f"\ninput: {frames} frames of 540x960 JPEG, {input_bytes / MB:.1f} MB; windows of "
          f"{WINDOW} frames of {FRAME_SIZE}, stride {STRIDE}; reader batch {BATCH}")
    print(f"{'encoding':8s} {'windows':>7s} {'shard MB':>9s} {'KB/frame':>9s} {'job s':>6s} "
          f"{'epoch s':>8s} {'1st batch s':>12s} {'windows/s':>10s} {'frames/s':>9s} "
          f"{'windows/cpu-s':>14s}")
    for name, s in summary.items():
        print(f"{name:8s} {s['windows']:7d} {s['shard_bytes'] / MB:9.1f} "
              f"{s['bytes_per_frame'] / 1024:9.1f} {s['job_wall_s']:6.1f} "
              f"{s['median_epoch_s']:8.2f} {s['median_first_batch_s']:12.2f} "
              f"{s['median_windows_per_s']:10.1f} "
              f"{s['median_frames_per_s']:9.0f} {s['median_windows_per_cpu_s']:14.1f}")
    print("KB/frame: shard bytes / (windows x 16); each frame is in two windows (stride 8)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--videos", type=int, default=8)
    parser.add_argument("--frames", type=int, default=48, help="frames per video")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--encodings", default=",".join(ENCODINGS))
    parser.add_argument("--json", required=True, help="where the results go")
    parser.add_argument("--work_dir", default=None,
                        help="where the data is written (default: a temp dir, removed after)")
    args = parser.parse_args()
    encodings = args.encodings.split(",")
    unknown = [e for e in encodings if e not in ENCODINGS]
    if unknown:
        parser.error(f"--encodings: unknown {unknown}; known: {list(ENCODINGS)}")

    with tempfile.TemporaryDirectory() as temp_dir:
        work_dir = args.work_dir or temp_dir
        manifest = write_frame_manifest(work_dir, args.videos, args.frames)
        frames, input_bytes = frame_bytes(manifest)
        out_dirs = {e: os.path.join(work_dir, f"out-{e}") for e in encodings}
        jobs = {}
        for e in encodings:
            jobs[e] = run_job(manifest, out_dirs[e], e, os.path.join(work_dir, f"job-{e}.log"))
            print(f"job {e:5s} {jobs[e]['wall_s']:6.1f} s, {jobs[e]['windows']} windows, "
                  f"{jobs[e]['shard_bytes'] / MB:.1f} MB of shards", flush=True)
        runs = read_rounds(out_dirs, args.repeats)

    summary = summarize(jobs, runs)
    print_table(summary, frames, input_bytes)
    with open(args.json, "w") as f:
        json.dump({"config": {"videos": args.videos, "frames_per_video": args.frames,
                              "frames": frames, "input_bytes": input_bytes,
                              "window": WINDOW, "stride": STRIDE, "frame_size": FRAME_SIZE,
                              "num_shards": NUM_SHARDS, "batch_size": BATCH,
                              "repeats": args.repeats, "cpus": os.cpu_count()},
                   "jobs": jobs, "runs": runs, "summary": summary}, f, indent=2)
    print(f"wrote {args.json}")


if __name__ == "__main__":
    main()
