"""The latent job against a plain loop and TensorFlow Datasets: wall time, memory, shuffle.

    python benchmarks/bench_job.py --json bench_job.json \\
        [--videos 384] [--scales 1,4] [--files 16] [--repeats 3] [--work_dir DIR]
    python benchmarks/bench_job.py --json bench_job_sizes.json --scales 4,12,26 \\
        --contenders loop,job,spill,all_cores    # 1, 2.8 and 6 GB: each byte written once
    python benchmarks/bench_job.py --table_from bench_job.json   # the markdown table again

For each scale s, writes s * --videos latent videos as serialized-tensor records
(beam_jobs.sample: 700-899 x 200 float32 frames, about 0.6 MiB a video; 384 videos are
about 240 MiB) over --files files, then runs the contenders in turns (loop, job,
baseline, all_cores, tfds, loop, ...), --repeats times each, every one a whole subprocess, so that
its wall time includes Python, TensorFlow (and Beam, TFDS) start-up. Windows of 100
frames every 50 (the job's default --tail align_end):

  loop       `python benchmarks/latent_windows.py`: read, parse, cut, the project's own
             Example encoder (readers.format), 4 files round-robin; no shuffle
  job        `python -m beam_jobs.make_shards --input ... --output_dir ... --window 100
             --stride 50 --overwrite`: one process (`--shuffle auto`: place, each
             window written once at its place)
  spill      the same with `--shuffle spill`: each window written twice, sorted files
             and then the shards
  baseline   the same, one process, with the job of --baseline (a commit, default
             e2dcfa4, extracted under the work dir: benchmarks/job_versions.py)
  all_cores  the same with --all_cores
  tfds       `python benchmarks/tfds_windows.py`: a tfds.core.GeneratorBasedBuilder that
             yields the same windows, download_and_prepare with TFDS's defaults

Before each run, every earlier output is removed and the page cache synced, so that no
run pays for writing back another's pages. Each run's figures
(benchmarks/process_tree.py): wall time, the peak RSS of its whole process tree (sampled
every 0.2 s; shared pages count once per process, as a forked worker's do) and of its
largest process, CPU seconds, and the CPU seconds other processes of the machine used
meanwhile (noise), and the bytes its processes wrote (`written_mb`, process_tree.run_tree; set
against the bytes of the output directory). After each
run its output is read back with readers.format (numpy): the windows, a digest of their
(video id, start) pairs, which every contender must share, and the shuffle quality: the
fraction of adjacent records, in each output file's order, that come from one video
(about 1 / videos when shuffled; the loop's is high by design).

Ratios are speed ratios of median wall times, x/y = y's wall / x's wall (above 1: x is
faster): job/loop, job/spill, job/baseline, all_cores/single (all_cores against job) and
job/TFDS; and each contender's seconds per GiB of input, scale by scale. The markdown
table printed at the end is the one in docs/benchmarks.md; --table_from prints it again
from the JSON. Every subprocess runs with this tree first on PYTHONPATH, Beam's worker
processes too, so that the code measured is this checkout's.
"""
from __future__ import annotations

import argparse
import glob
import hashlib
import json
import os
import shutil
import statistics
import sys
import tempfile
import time

from job_versions import code_of
from latent_windows import FEATURES
from process_tree import MB, QUIET_PERCENT, REPO, run_tree, wait_for_quiet

from beam_jobs.sample import write_latent_sample
from readers import format as data_format
from readers.format.tfrecord import Lost, read_frame

HERE = os.path.dirname(os.path.abspath(__file__))
CONTENDERS = ("loop", "job", "spill", "baseline", "all_cores", "tfds")
BASELINE = "e2dcfa4"   # the job before the round that cost the latent path a third
LABELS = {
    "loop": "a plain no-shuffle loop (read, parse, cut, the project's Example encoder, "
            "4 files round-robin)",
    "job": "the job, one process",
    "spill": "the job, one process, `--shuffle spill`",
    "baseline": "the job at `--baseline`, one process",
    "all_cores": "the job, `--all_cores`",
    "tfds": "TensorFlow Datasets (`GeneratorBasedBuilder`, `download_and_prepare`)",
}
RATIOS = {  # name: (faster, slower): slower's median wall / faster's
    "job/loop": ("job", "loop"),
    "job/spill": ("job", "spill"),
    "job/baseline": ("job", "baseline"),
    "all_cores/single": ("all_cores", "job"),
    "job/TFDS": ("job", "tfds"),
}
ID_FEATURES = [f for f in FEATURES if f.name in ("video_id", "start")]


def command(name: str, pattern: str, out: str) -> list[str]:
    if name == "loop":
        return [sys.executable, os.path.join(HERE, "latent_windows.py"), pattern, out]
    if name == "tfds":
        return [sys.executable, os.path.join(HERE, "tfds_windows.py"), pattern, out]
    return [sys.executable, "-m", "beam_jobs.make_shards", "--input", pattern,
            "--output_dir", out, "--window", "100", "--stride", "50", "--overwrite",
            *(["--all_cores"] if name == "all_cores" else []),
            *(["--shuffle", "spill"] if name == "spill" else [])]


def output_files(name: str, out: str) -> list[str]:
    if name == "loop":
        return sorted(glob.glob(os.path.join(out, "*.tfrecord")))
    if name == "tfds":
        return sorted(glob.glob(os.path.join(out, "latent_windows", "*", "*.tfrecord-*")))
    spec = data_format.load_spec(out)
    return [os.path.join(out, s.file) for split in spec.splits.values() for s in split.shards]


def tree_bytes(directory: str) -> int:
    """The bytes of every file under `directory`: the dataset a run leaves."""
    return sum(os.path.getsize(os.path.join(root, name))
               for root, _, names in os.walk(directory) for name in names)


def read_back(files: list[str]) -> dict:
    """The windows of the files, a digest of their sorted (video id, start) pairs, and
    the fraction of adjacent records (within a file) from one video."""
    pairs, adjacent, same = [], 0, 0
    for path in files:
        previous = None
        with open(path, "rb") as f:
            while (record := read_frame(f)) is not None:
                if isinstance(record, Lost):
                    raise ValueError(f"{path}: {record.reason}")
                values = data_format.layout(ID_FEATURES, record).values(ID_FEATURES, record)
                video = values["video_id"]
                if previous is not None:
                    adjacent += 1
                    same += video == previous
                previous = video
                pairs.append((video, int(values["start"])))
    digest = hashlib.sha256(repr(sorted(pairs)).encode()).hexdigest()[:16]
    return {"windows": len(pairs), "files": len(files), "windows_digest": digest,
            "same_video_adjacent": same / adjacent if adjacent else 0.0}


def run_contender(name: str, pattern: str, work_dir: str, tag: str, quiet_wait_s: float,
                  code_dir: str = REPO) -> dict:
    """One run of contender `name`; `code_dir`: the tree whose job runs (its beam_jobs
    is the one `python -m` finds first, in the working directory)."""
    out = os.path.join(work_dir, f"out-{name}")
    # Every run starts alike: no output of an earlier run (TFDS would reuse a prepared
    # dataset), none of its pages still waiting to be written to disk (the kernel would
    # write them back during this run).
    for earlier in glob.glob(os.path.join(work_dir, "out-*")):
        shutil.rmtree(earlier)
    os.sync()
    waited = wait_for_quiet(quiet_wait_s)
    load = os.getloadavg()[0]
    run = run_tree(command(name, pattern, out), os.path.join(work_dir, f"{name}-{tag}.log"),
                   cwd=code_dir)
    run.pop("output")
    run.update(read_back(output_files(name, out)), load_1min=round(load, 2),
               waited_for_quiet_s=round(waited, 1), dataset_mb=round(tree_bytes(out) / MB, 1))
    return run


def bench_scale(work_dir: str, videos: int, files: int, repeats: int, names: list[str],
                quiet_wait_s: float, baseline_dir: str = REPO) -> dict:
    input_dir = os.path.join(work_dir, f"latents-{videos}")
    if not os.path.isdir(input_dir):
        write_latent_sample(input_dir, videos=videos, files=files)
    pattern = os.path.join(input_dir, "*.tfrecord")
    input_mb = sum(os.path.getsize(p) for p in glob.glob(pattern)) / MB
    print(f"\n{videos} videos, {input_mb:.0f} MiB in {files} files", flush=True)
    runs: dict[str, list[dict]] = {name: [] for name in names}
    for r in range(repeats):
        for name in names:
            run = run_contender(name, pattern, work_dir, f"{videos}-{r + 1}", quiet_wait_s,
                                baseline_dir if name == "baseline" else REPO)
            runs[name].append(run)
            print(f"run {r + 1} {name:9s} {run['wall_s']:6.1f} s, peak {run['peak_mb']:6.0f} MB "
                  f"(one process {run['peak_process_mb']:4.0f}), "
                  f"cpu {run['cpu_s']:5.1f} s, others' cpu {run['others_cpu_s']:5.1f} s, "
                  f"wrote {run['written_mb'] / run['dataset_mb']:.2f}x its output, "
                  f"load {run['load_1min']:.1f}; {run['windows']} windows in {run['files']} "
                  f"files, same video adjacent {run['same_video_adjacent']:.3f}", flush=True)
    return {"videos": videos, "files": files, "input_mib": round(input_mb, 1), "runs": runs}


def summarize(scale: dict) -> dict:
    """Medians per contender, the ratios, and whether every contender wrote the same
    windows."""
    runs = scale["runs"]
    med = {name: {key: statistics.median(r[key] for r in rs)
                  for key in ("wall_s", "peak_mb", "peak_process_mb", "cpu_s",
                              "same_video_adjacent", "written_mb", "dataset_mb")}
           for name, rs in runs.items()}
    ratios = {key: med[slow]["wall_s"] / med[fast]["wall_s"]
              for key, (fast, slow) in RATIOS.items() if fast in med and slow in med}
    digests = {r["windows_digest"] for rs in runs.values() for r in rs}
    return {"median": med, "ratios": ratios, "same_windows": len(digests) == 1}


def markdown(results: dict) -> str:
    """The tables of docs/benchmarks.md, from the JSON this script writes."""
    lines = []
    for scale in results["scales"]:
        summary, runs = scale["summary"], scale["runs"]
        job_wall = summary["median"].get("job", {}).get("wall_s")
        lines += [f"{scale['videos']:,} videos, {scale['input_mib']:,.0f} MiB in "
                  f"{scale['files']} files:", "",
                  "| contender | wall s (median) | runs | vs the job | peak MB: all "
                  "processes, largest one | bytes written / output's | same video adjacent |",
                  "|---|---|---|---|---|---|---|"]
        for name, med in summary["median"].items():
            low, high = (f(r["wall_s"] for r in runs[name]) for f in (min, max))
            walls = f"{low:.1f}-{high:.1f}" if high > low else f"{low:.1f}"
            versus = f"{job_wall / med['wall_s']:.2f}x" if job_wall else "-"
            lines.append(f"| {LABELS[name]} | {med['wall_s']:.1f} | {walls} | {versus} | "
                         f"{med['peak_mb']:,.0f}, {med['peak_process_mb']:,.0f} | "
                         f"{_written(name, med)} | {med['same_video_adjacent']:.3f} |")
        ratios = ", ".join(f"{key} **{value:.2f}x**" for key, value in summary["ratios"].items())
        same = "the same windows" if summary["same_windows"] else "DIFFERENT WINDOWS"
        every = [r for rs in runs.values() for r in rs]
        windows = every[0]["windows"]
        loads = [r["load_1min"] for r in every]
        noise = statistics.median(r["others_cpu_s"] / r["wall_s"] for r in every)
        lines += ["", f"{ratios}; {windows:,} windows, {same} from every contender. Load "
                  f"(1-minute average before a run) {min(loads):.1f}-{max(loads):.1f}; other "
                  f"processes used {noise:.2f} cores during a run (median).", ""]
    if len(results["scales"]) > 1:
        lines += per_gib(results["scales"])
    return "\n".join(lines)


def _written(name: str, median: dict) -> str:
    """Bytes written / the output's; "-" where not counted: a JSON from before they were,
    or --all_cores, whose forked workers the command does not wait for (process_tree)."""
    if name == "all_cores" or "written_mb" not in median:
        return "-"
    return f"{median['written_mb'] / median['dataset_mb']:.2f}x"


def per_gib(scales: list[dict]) -> list[str]:
    """Each contender's median seconds per GiB of input, one column a scale: a row that
    stays level is a cost linear in the input."""
    names = list(scales[0]["summary"]["median"])
    sizes = [f"{scale['input_mib'] / 1024:.1f} GiB" for scale in scales]
    lines = ["Seconds per GiB of input (median wall / input):", "",
             "| contender | " + " | ".join(sizes) + " |", "|---|" + "---|" * len(sizes)]
    for name in names:
        cells = [f"{scale['summary']['median'][name]['wall_s'] / (scale['input_mib'] / 1024):.1f}"
                 for scale in scales if name in scale["summary"]["median"]]
        lines.append(f"| {LABELS[name]} | " + " | ".join(cells) + " |")
    return lines + [""]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--videos", type=int, default=384, help="videos at scale 1")
    parser.add_argument("--scales", default="1,4", help="comma-separated (default: %(default)s)")
    parser.add_argument("--files", type=int, default=16,
                        help="input files at every scale (default: %(default)s)")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--contenders", default=",".join(CONTENDERS),
                        help="comma-separated, in turn order (default: %(default)s)")
    parser.add_argument("--quiet_wait_s", type=float, default=10.0,
                        help="before each run, wait up to this long for other processes "
                             f"to use under {QUIET_PERCENT}%% of the CPUs (default: %(default)s)")
    parser.add_argument("--json", help="where every run's figures go (required)")
    parser.add_argument("--work_dir", default=None,
                        help="where inputs and outputs are written; inputs already there are "
                             "reused (default: a temp dir, removed after)")
    parser.add_argument("--baseline", default=BASELINE,
                        help="the commit the `baseline` contender runs (default: %(default)s)")
    parser.add_argument("--table_from", metavar="JSON",
                        help="print the markdown table of an earlier run's JSON and stop")
    args = parser.parse_args()
    if args.table_from:
        with open(args.table_from) as f:
            print(markdown(json.load(f)))
        return
    if not args.json:
        parser.error("--json is required")
    names = args.contenders.split(",")
    if not names or any(n not in CONTENDERS for n in names):
        parser.error(f"--contenders: some of {', '.join(CONTENDERS)}")
    scales = [int(s) for s in args.scales.split(",")]
    # Beam's worker processes are fresh interpreters: PYTHONPATH makes them import this tree.
    os.environ["PYTHONPATH"] = os.pathsep.join(
        [REPO, *filter(None, os.environ.get("PYTHONPATH", "").split(os.pathsep))])

    start = time.perf_counter()
    with tempfile.TemporaryDirectory() as temp_dir:
        work_dir = args.work_dir or temp_dir
        os.makedirs(work_dir, exist_ok=True)
        results = {"config": {"videos_at_1": args.videos, "scales": scales, "files": args.files,
                              "repeats": args.repeats, "contenders": names,
                              "baseline": args.baseline,
                              "window": 100, "stride": 50, "cpus": os.cpu_count(),
                              "started_utc": time.strftime("%Y-%m-%d %H:%M", time.gmtime())},
                   "scales": []}
        baseline_dir = code_of(args.baseline, work_dir) if "baseline" in names else REPO
        for s in scales:
            scale = bench_scale(work_dir, s * args.videos, args.files, args.repeats, names,
                                args.quiet_wait_s, baseline_dir)
            scale["summary"] = summarize(scale)
            results["scales"].append(scale)
            with open(args.json, "w") as f:   # each scale as it ends
                json.dump(results, f, indent=1)
    results["total_s"] = round(time.perf_counter() - start)
    with open(args.json, "w") as f:
        json.dump(results, f, indent=1)
    print(f"\nx/y: y's median wall / x's (above 1: x is faster). {results['total_s']} s in all; "
          f"wrote {args.json}\n")
    print(markdown(results))


if __name__ == "__main__":
    main()
