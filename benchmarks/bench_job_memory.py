"""Peak memory of the Beam job's whole process tree at 1x and 4x the videos.

    python benchmarks/bench_job_memory.py --json bench_job_memory.json \\
        [--videos 128] [--repeats 3] [--work_dir DIR] [JOB FLAGS ...]

e.g. with two worker processes and a smaller shuffle bucket:

    python benchmarks/bench_job_memory.py --json mem.json \\
        --direct_num_workers 2 --direct_running_mode multi_processing --shuffle_bucket_mb 32

For scale s in (1, 4), writes a latent sample of s * --videos videos over s * 4 files
(the same videos per file), then runs
`python -m beam_jobs.make_shards --input ... --output_dir ... --window 100 --stride 50
--overwrite [JOB FLAGS]` in a subprocess --repeats times. Any flag this script does not
know is passed to the job. Every ~50 ms it sums the RSS of the job's process and all its
descendants; the peak of that sum is a run's peak. The table shows the median peak per
scale and the ratio 4x / 1x (target <= 1.1), and each run's wall time. The JSON holds
each run's RSS timeline too, to see which stage holds the memory.
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
from process_tree import MB, REPO, tree_rss

from beam_jobs.sample import write_latent_sample

SCALES = (1, 4)
FILES_PER_SCALE = 4
SAMPLE_EVERY_S = 0.05
TARGET_RATIO = 1.1


def run_job(input_glob: str, output_dir: str, job_flags: list[str], log_path: str) -> dict:
    """Run the job once (--overwrite and `job_flags`); its wall time, peak tree RSS, RSS
    timeline [(s, MB, procs)] and windows written."""
    command = [sys.executable, "-m", "beam_jobs.make_shards", "--input", input_glob,
               "--output_dir", output_dir, "--overwrite", *job_flags]
    timeline = []
    with open(log_path, "w") as log:
        start = time.perf_counter()
        job = subprocess.Popen(command, cwd=REPO, stdout=log, stderr=subprocess.STDOUT)
        process = psutil.Process(job.pid)
        while job.poll() is None:
            rss, count = tree_rss(process)
            if count:
                timeline.append((round(time.perf_counter() - start, 3), round(rss / MB, 1),
                                 count))
            time.sleep(SAMPLE_EVERY_S)
        wall = time.perf_counter() - start
    if job.returncode:
        with open(log_path) as log:
            tail = "".join(log.readlines()[-20:])
        raise RuntimeError(f"job exited with {job.returncode}: {' '.join(command)}\n{tail}")
    with open(os.path.join(output_dir, "dataset.json")) as f:
        windows = sum(s["windows"] for s in json.load(f)["splits"].values())
    return {"wall_s": wall, "peak_mb": max((mb for _, mb, _ in timeline), default=0.0),
            "windows": windows, "timeline": timeline}


def bench_scale(work_dir: str, scale: int, videos: int, repeats: int,
                job_flags: list[str]) -> list[dict]:
    input_dir = os.path.join(work_dir, f"latents-{scale}x")
    write_latent_sample(input_dir, videos=scale * videos, files=scale * FILES_PER_SCALE)
    runs = []
    for r in range(repeats):
        result = run_job(os.path.join(input_dir, "*.tfrecord"),
                         os.path.join(work_dir, f"shards-{scale}x"),
                         ["--window", "100", "--stride", "50", *job_flags],
                         os.path.join(work_dir, f"job-{scale}x-{r}.log"))
        print(f"{scale}x run {r + 1}: peak {result['peak_mb']:7.0f} MB, "
              f"wall {result['wall_s']:6.1f} s", flush=True)
        runs.append(result)
    return runs


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     epilog="Other flags are passed to the job.")
    parser.add_argument("--videos", type=int, default=128, help="videos at 1x")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--json", required=True, help="where the results go")
    parser.add_argument("--work_dir", default=None,
                        help="where the data is written (default: a temp dir, removed after)")
    args, job_flags = parser.parse_known_args()

    with tempfile.TemporaryDirectory() as temp_dir:
        work_dir = args.work_dir or temp_dir
        runs = {f"{s}x": bench_scale(work_dir, s, args.videos, args.repeats, job_flags)
                for s in SCALES}

    peaks = {scale: statistics.median(r["peak_mb"] for r in rs) for scale, rs in runs.items()}
    ratio = peaks["4x"] / peaks["1x"]
    print(f"\njob flags: {' '.join(job_flags) or '(none)'}")
    print(f"{'scale':5s} {'videos':>6s} {'median peak MB':>15s} {'wall s per run':>24s}")
    for s in SCALES:
        walls = " ".join(f"{r['wall_s']:.1f}" for r in runs[f"{s}x"])
        print(f"{s}x    {s * args.videos:6d} {peaks[f'{s}x']:15.0f} {walls:>24s}")
    verdict = "met" if ratio <= TARGET_RATIO else "MISSED"
    print(f"4x/1x {ratio:.2f}  (target <= {TARGET_RATIO}: {verdict})")
    with open(args.json, "w") as f:
        json.dump({"config": {"videos_1x": args.videos, "repeats": args.repeats,
                              "files_per_scale": FILES_PER_SCALE, "job_flags": job_flags,
                              "sample_every_s": SAMPLE_EVERY_S, "cpus": os.cpu_count()},
                   "median_peak_mb": peaks, "ratio_4x_1x": ratio,
                   "target_met": ratio <= TARGET_RATIO, "runs": runs}, f)
    print(f"wrote {args.json}")


if __name__ == "__main__":
    main()
