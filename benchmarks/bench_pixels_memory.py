"""Peak memory of the pixel job's whole process tree at 1x and 4x the videos.

    python benchmarks/bench_pixels_memory.py --json bench_pixels_memory.json \\
        [--videos 4] [--frames 64] [--repeats 3] [--configs jpeg,raw270] \\
        [--work_dir DIR] [JOB FLAGS ...]

Writes frame folders of 540x960 JPEGs (benchmarks/pixel_sample.py; the 4x set holds
the 1x set) and, for scale s in (1, 4), a manifest of s * --videos videos of --frames
frames each. Then, in turns (each config at 1x then 4x, --repeats rounds), runs
`python -m beam_jobs.make_shards --input MANIFEST --output_dir ... --window 16 --stride 8
--overwrite CONFIG FLAGS [JOB FLAGS]` in a subprocess, where the configs are

  jpeg     --frame_encoding jpeg                      frames kept as they are (540x960)
  raw270   --frame_encoding raw --frame_size 270x480  resized, stored as uint8 arrays

Any flag this script does not know is passed to the job. Every ~50 ms it sums the RSS
of the job's process and all its descendants (as benchmarks/bench_job_memory.py); the
peak of that sum is a run's peak. The table shows the median peak per config and scale,
the ratio 4x / 1x (target <= 1.1), and each run's wall time. The JSON holds each run's
RSS timeline (seconds, MB, processes), to see which stage holds the memory.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import tempfile

from bench_job_memory import SAMPLE_EVERY_S, run_job
from pixel_sample import write_frame_manifest

SCALES = (1, 4)
WINDOW, STRIDE = 16, 8
CONFIGS = {"jpeg": ["--frame_encoding", "jpeg"],
           "raw270": ["--frame_encoding", "raw", "--frame_size", "270x480"]}
TARGET_RATIO = 1.1
MB = 2**20


def run_rounds(work_dir: str, manifests: dict[int, str], configs: list[str], repeats: int,
               job_flags: list[str]) -> dict[str, dict[str, list[dict]]]:
    runs: dict[str, dict[str, list[dict]]] = {c: {f"{s}x": [] for s in SCALES}
                                              for c in configs}
    for r in range(repeats):
        for config in configs:
            for scale in SCALES:
                name = f"{config}-{scale}x"
                result = run_job(manifests[scale], os.path.join(work_dir, f"out-{name}"),
                                 ["--window", str(WINDOW), "--stride", str(STRIDE),
                                  *CONFIGS[config], *job_flags],
                                 os.path.join(work_dir, f"job-{name}-{r}.log"))
                runs[config][f"{scale}x"].append(result)
                print(f"round {r + 1} {config:7s} {scale}x: peak {result['peak_mb']:7.0f} MB, "
                      f"wall {result['wall_s']:6.1f} s, {result['windows']} windows",
                      flush=True)
    return runs


def summarize(runs: dict[str, dict[str, list[dict]]]) -> dict:
    peaks = {c: {scale: statistics.median(r["peak_mb"] for r in rs)
                 for scale, rs in by_scale.items()} for c, by_scale in runs.items()}
    ratios = {c: p["4x"] / p["1x"] for c, p in peaks.items()}
    return {"median_peak_mb": peaks, "ratio_4x_1x": ratios,
            "targets_met": {c: ratio <= TARGET_RATIO for c, ratio in ratios.items()}}


def print_table(runs: dict, summary: dict, videos: int, frames: int,
                job_flags: list[str]) -> None:
    extra = f"; extra job flags: {' '.join(job_flags)}" if job_flags else ""
    print(f"\n{frames} frames a video, 540x960 JPEG input; --window {WINDOW} --stride "
          f"{STRIDE} and each config's flags{extra}")
    print(f"{'config':8s} {'scale':5s} {'videos':>6s} {'windows':>8s} {'median peak MB':>15s} "
          f"{'wall s per run':>24s}")
    for config, by_scale in runs.items():
        for s in SCALES:
            rs = by_scale[f"{s}x"]
            walls = " ".join(f"{r['wall_s']:.1f}" for r in rs)
            print(f"{config:8s} {s}x    {s * videos:6d} {rs[0]['windows']:8d} "
                  f"{summary['median_peak_mb'][config][f'{s}x']:15.0f} {walls:>24s}")
    for config, ratio in summary["ratio_4x_1x"].items():
        verdict = "met" if summary["targets_met"][config] else "MISSED"
        print(f"{config:8s} 4x/1x {ratio:.2f}  (target <= {TARGET_RATIO}: {verdict})")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     epilog="Other flags are passed to the job.")
    parser.add_argument("--videos", type=int, default=4, help="videos at 1x")
    parser.add_argument("--frames", type=int, default=64, help="frames per video")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--configs", default=",".join(CONFIGS),
                        help=f"comma-separated, of {sorted(CONFIGS)} (default: all)")
    parser.add_argument("--json", required=True, help="where the results go")
    parser.add_argument("--work_dir", default=None,
                        help="where the data is written (default: a temp dir, removed after)")
    args, job_flags = parser.parse_known_args()
    configs = args.configs.split(",")
    unknown = [c for c in configs if c not in CONFIGS]
    if unknown:
        parser.error(f"--configs: unknown {unknown}; known: {sorted(CONFIGS)}")

    with tempfile.TemporaryDirectory() as temp_dir:
        work_dir = args.work_dir or temp_dir
        manifests = {s: write_frame_manifest(work_dir, s * args.videos, args.frames)
                     for s in SCALES}
        runs = run_rounds(work_dir, manifests, configs, args.repeats, job_flags)

    summary = summarize(runs)
    print_table(runs, summary, args.videos, args.frames, job_flags)
    with open(args.json, "w") as f:
        json.dump({"config": {"videos_1x": args.videos, "frames_per_video": args.frames,
                              "repeats": args.repeats, "window": WINDOW, "stride": STRIDE,
                              "configs": {c: CONFIGS[c] for c in configs},
                              "job_flags": job_flags, "sample_every_s": SAMPLE_EVERY_S,
                              "cpus": os.cpu_count()},
                   "runs": runs, **summary}, f)
    print(f"wrote {args.json}")


if __name__ == "__main__":
    main()
