"""`readers.inspect OUT --report`: its time, peak memory and file size, for the README's
sample and for a dataset of about 1 GB; the videos file's streaming rate, the one part of
the report's cost that grows with the dataset (docs/report.md does the arithmetic).

    python benchmarks/bench_report.py [--videos 800] [--repeats 3] [--work_dir DIR]
        [--screenshot docs/report.png] [--json bench_report.json]

Builds both datasets with real job runs (beam_jobs.sample's latents, window 100, stride
50 as the README's first command): the sample's 24 videos, and --videos videos (800:
about 12,400 windows of 80 KB, 1 GB of shards). Each report is made --repeats times, each
time by the command in a process of its own (`python -m readers.inspect OUT --report
...`), timed from start to exit, its peak RSS its own VmHWM at exit; the table gives
medians, each made beside its dataset (`readers.inspect out/ --report ...`, as the README
runs it). With --screenshot, headless Chromium takes a picture of the sample's report
(the one docs/report.md shows: made with --work_dir /home/user/video-window-shards, a
clone's folder, so that it shows no temporary path of the machine it was made on).
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO)

from beam_jobs import make_shards  # noqa: E402
from beam_jobs.sample import write_latent_sample  # noqa: E402
from readers import format as data_format  # noqa: E402
from readers.files import DatasetFiles  # noqa: E402
from readers.report import collect  # noqa: E402

WINDOW, STRIDE = 100, 50
SCREENSHOT_SIZE = (1280, 3400)


def build(work_dir: str, name: str, videos: int, files: int, inputs: str = "") -> str:
    """Latent sample videos (in `inputs`, default NAME-in) cut into shards by the job;
    the output directory."""
    inputs = os.path.join(work_dir, inputs or f"{name}-in")
    write_latent_sample(inputs, videos=videos, files=files)
    out = os.path.join(work_dir, name)
    make_shards.run(["--input", os.path.join(inputs, "latents-*.tfrecord"),
                     "--output_dir", out,
                     "--window", str(WINDOW), "--stride", str(STRIDE), "--overwrite",
                     *(["--all_cores"] if videos > 100 else [])])
    return out


# The command, and at its exit its own peak RSS (VmHWM: of this process image since its
# exec; the kernel's ru_maxrss would count this benchmark's memory at the fork too).
_COMMAND = """
import runpy, sys
sys.argv = ["readers.inspect", *sys.argv[1:]]
try:
    runpy.run_module("readers.inspect", run_name="__main__", alter_sys=True)
finally:
    peak = next(line for line in open("/proc/self/status") if line.startswith("VmHWM:"))
    print("peak", int(peak.split()[1]) * 1024, file=sys.stderr)
"""


def timed_report(out: str, page: str, samples: int) -> tuple[float, int]:
    """(seconds, peak RSS in bytes) of the command in a new process, run beside the
    dataset as the README runs it (`readers.inspect out/ --report ...`)."""
    started = time.perf_counter()
    done = subprocess.run([sys.executable, "-c", _COMMAND, os.path.basename(out) + "/",
                           "--report", page, "--report_samples", str(samples)],
                          cwd=os.path.dirname(out), env={**os.environ, "PYTHONPATH": REPO},
                          stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    seconds = time.perf_counter() - started
    if done.returncode:
        raise SystemExit(f"the report of {out} failed: {done.stderr[-2000:]}")
    return seconds, int(done.stderr.rsplit("peak ", 1)[1].split()[0])


def videos_rows_per_second(rows: int = 200_000) -> float:
    """Rows of a videos file streamed and counted a second, as collect.py does (rows of
    the job's shape, about 250 bytes)."""
    with tempfile.NamedTemporaryFile("w", suffix=".jsonl", delete=False) as f:
        for i in range(rows):
            f.write(json.dumps({"bad_frames": 0, "digest": "0" * 32, "frames": 700 + i % 200,
                                "record_index": i, "source": f"gs://bucket/in/latents-{i % 97:05d}"
                                ".tfrecord", "source_fps": None, "split": "train",
                                "video_id": f"latents-{i % 97:05d}.tfrecord:{i}",
                                "windows": 13 + i % 4}) + "\n")
    try:
        videos = collect.SplitVideos()
        started = time.perf_counter()
        for row in DatasetFiles(os.path.dirname(f.name)).rows(os.path.basename(f.name)):
            videos.add(row)
        return rows / (time.perf_counter() - started)
    finally:
        os.remove(f.name)


def screenshot(page: str, out: str) -> None:
    """Headless Chromium's picture of the top of the page."""
    chromium = shutil.which("chromium")
    if not chromium:
        raise SystemExit("--screenshot needs chromium (apt-get install -y chromium)")
    with tempfile.TemporaryDirectory() as profile:
        subprocess.run([chromium, "--headless", "--no-sandbox", "--disable-gpu",
                        "--hide-scrollbars", f"--user-data-dir={profile}",
                        f"--window-size={SCREENSHOT_SIZE[0]},{SCREENSHOT_SIZE[1]}",
                        f"--screenshot={os.path.abspath(out)}", f"file://{page}"],
                       check=True, capture_output=True, timeout=120)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--videos", type=int, default=800,
                        help="videos of the larger dataset (default: %(default)s, ~1 GB)")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--work_dir", help="where the datasets go (default: a temp dir)")
    parser.add_argument("--screenshot", help="a PNG of the sample's report")
    parser.add_argument("--json", help="also write the figures here")
    args = parser.parse_args()
    work_dir = args.work_dir or tempfile.mkdtemp(prefix="bench_report-")
    # the README's sample, as its first command makes it: sample/ cut into out/
    cases = [("the sample (24 videos)", build(work_dir, "out", 24, 3, "sample"), 12),
             (f"{args.videos} videos", build(work_dir, "large", args.videos, 8), 12),
             (f"{args.videos} videos", os.path.join(work_dir, "large"), 48)]
    rows = []
    for label, out, samples in cases:
        spec = data_format.load_spec(out)
        page = os.path.join(work_dir, f"{os.path.basename(out)}-{samples}.html")
        runs = [timed_report(out, page, samples) for _ in range(args.repeats)]
        rows.append({
            "dataset": label, "windows": sum(s.windows for s in spec.splits.values()),
            "shards": sum(len(s.shards) for s in spec.splits.values()),
            "dataset_mb": sum(os.path.getsize(os.path.join(out, s.file))
                              for split in spec.splits.values() for s in split.shards) / 1e6,
            "samples": samples, "seconds": statistics.median(r[0] for r in runs),
            "peak_rss_mb": statistics.median(r[1] for r in runs) / 2**20,
            "report_mb": os.path.getsize(page) / 1e6})
        if args.screenshot and label.startswith("the sample"):
            screenshot(page, args.screenshot)
    rate = videos_rows_per_second()
    print("| dataset | windows | shards | shards MB | --report_samples | seconds | peak RSS "
          "MiB | report MB |\n|---|---|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['dataset']} | {r['windows']:,} | {r['shards']} | {r['dataset_mb']:,.0f} | "
              f"{r['samples']} | {r['seconds']:.2f} | {r['peak_rss_mb']:.0f} | "
              f"{r['report_mb']:.2f} |")
    print(f"\nvideos file streamed and counted: {rate:,.0f} rows/s")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"rows": rows, "videos_rows_per_second": rate}, f, indent=1)


if __name__ == "__main__":
    main()
