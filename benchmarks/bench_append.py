"""`--append` of a few new videos against a full rebuild of the same inputs; and how the
readers mix the new generation into batches.

    python benchmarks/bench_append.py --json bench_append.json \\
        [--videos 1536] [--files 16] [--new_fraction 0.05] [--repeats 3] [--work_dir DIR]

Writes --videos latent videos (beam_jobs.sample: 700-899 x 200 float32 frames, about
0.6 MiB each) over --files files, builds a dataset of them once (window 100, stride 50),
then adds a file of --new_fraction as many new videos. In turns, --repeats times:

  rebuild  the job over all the files into a fresh directory (--overwrite)
  append   the job with --append over all the files, into a copy of the first dataset
           (hard links: an append never writes an existing file)

Each is a whole subprocess (benchmarks/process_tree.py: wall time with start-up, peak
RSS of its process tree). Both datasets must hold the same windows (a digest of their
(video id, start) pairs). `append/rebuild` is the ratio of median wall times (target:
at most 0.15).

Then the mixing: one epoch of batches of 64 from the appended dataset's train split,
through readers.numpy (`batches`, shuffled) and readers.make_dataset (tf.data), and per
batch the fraction of windows from the new generation, against its share of all windows:
their mean, their standard deviation against a uniform draw's (binomial), and the
fraction of batches with none.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys

import numpy as np
from bench_job import output_files, read_back
from process_tree import MB, run_tree, wait_for_quiet

from beam_jobs.sample import write_latent_sample

FLAGS = ["--window", "100", "--stride", "50"]
NEW_PREFIX = "new-"
BATCH = 64


def job(inputs: str, out: str, *extra: str) -> list[str]:
    return [sys.executable, "-m", "beam_jobs.make_shards", "--input", inputs,
            "--output_dir", out, *FLAGS, *extra]


def prepare(work_dir: str, videos: int, files: int, new_fraction: float) -> tuple[str, str]:
    """The input glob (old files and the new one) and the first dataset, of the old."""
    old = os.path.join(work_dir, f"latents-{videos}")
    if not os.path.isdir(old):
        write_latent_sample(old, videos=videos, files=files)
    inputs = os.path.join(work_dir, "append-inputs")
    shutil.rmtree(inputs, ignore_errors=True)
    os.makedirs(inputs)
    for name in sorted(os.listdir(old)):
        os.symlink(os.path.join(old, name), os.path.join(inputs, name))
    pattern = os.path.join(inputs, "*.tfrecord")
    base = os.path.join(work_dir, "append-base")
    shutil.rmtree(base, ignore_errors=True)
    run_tree(job(pattern, base), os.path.join(work_dir, "append-base.log"))
    new = os.path.join(work_dir, "append-new")
    shutil.rmtree(new, ignore_errors=True)
    (path,) = write_latent_sample(new, videos=max(1, round(videos * new_fraction)), files=1,
                                  seed=1)
    os.symlink(path, os.path.join(inputs, f"{NEW_PREFIX}000.tfrecord"))
    return pattern, base


def timed(name: str, command: list[str], out: str, log: str) -> dict:
    wait_for_quiet(10)
    run = run_tree(command, log)
    run.pop("output")
    run.update(read_back(output_files("job", out)))
    print(f"{name:8s} {run['wall_s']:6.1f} s, peak {run['peak_mb']:6.0f} MB, "
          f"{run['windows']} windows", flush=True)
    return run


def mixing(out: str) -> dict:
    """Per batch, the fraction of windows of the new generation, by each reader."""
    import readers
    from readers.numpy import WindowSource, batches

    source = WindowSource(out, "train", features=["video_id"])
    everything = source.read_batch(range(len(source)))["video_id"]
    share = float(np.mean([v.startswith(NEW_PREFIX.encode()) for v in everything]))
    steps = len(source) // BATCH
    numpy_ids = [b["video_id"] for b in
                 (batch for _, batch in zip(range(steps), batches(
                     out, "train", BATCH, seed=0, features=["video_id"]), strict=False))]
    tf_ids = [b["video_id"].numpy() for b in readers.make_dataset(
        out, "train", BATCH, seed=0, features=["video_id"]).take(steps)]
    result = {"new_share": share, "batch": BATCH, "steps": steps}
    for name, ids in (("numpy", numpy_ids), ("tf.data", tf_ids)):
        fractions = [float(np.mean([v.startswith(NEW_PREFIX.encode()) for v in batch]))
                     for batch in ids]
        result[name] = {"mean": statistics.mean(fractions),
                        "std": statistics.pstdev(fractions),
                        "uniform_std": (share * (1 - share) / BATCH) ** 0.5,
                        "batches_without_new": float(np.mean([f == 0 for f in fractions]))}
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--videos", type=int, default=1536)
    parser.add_argument("--files", type=int, default=16)
    parser.add_argument("--new_fraction", type=float, default=0.05)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--json", required=True)
    parser.add_argument("--work_dir", default="/tmp/bench_append")
    args = parser.parse_args()
    os.makedirs(args.work_dir, exist_ok=True)
    pattern, base = prepare(args.work_dir, args.videos, args.files, args.new_fraction)
    inputs_mib = sum(os.path.getsize(os.path.realpath(os.path.join(os.path.dirname(pattern), n)))
                     for n in os.listdir(os.path.dirname(pattern))) / MB
    print(f"{args.videos} videos and {round(args.videos * args.new_fraction)} new, "
          f"{inputs_mib:.0f} MiB", flush=True)
    runs: dict[str, list[dict]] = {"rebuild": [], "append": []}
    rebuilt = os.path.join(args.work_dir, "append-rebuilt")
    appended = os.path.join(args.work_dir, "append-appended")
    for r in range(args.repeats):
        shutil.rmtree(rebuilt, ignore_errors=True)    # so that the disk holds one rebuild
        runs["rebuild"].append(timed("rebuild", job(pattern, rebuilt, "--overwrite"), rebuilt,
                                     os.path.join(args.work_dir, f"rebuild-{r}.log")))
        shutil.rmtree(rebuilt)
        shutil.rmtree(appended, ignore_errors=True)
        shutil.copytree(base, appended, copy_function=os.link)
        runs["append"].append(timed("append", job(pattern, appended, "--append"), appended,
                                    os.path.join(args.work_dir, f"append-{r}.log")))
    digests = {run["windows_digest"] for rs in runs.values() for run in rs}
    median = {name: statistics.median(run["wall_s"] for run in rs) for name, rs in runs.items()}
    result = {"videos": args.videos, "new_fraction": args.new_fraction,
              "inputs_mib": round(inputs_mib, 1), "runs": runs, "median_wall_s": median,
              "append/rebuild": median["append"] / median["rebuild"],
              "same_windows": len(digests) == 1}
    with open(args.json, "w") as f:       # the timings are kept if the mixing fails
        json.dump(result, f, indent=2)
    result["mixing"] = mixing(appended)
    with open(args.json, "w") as f:
        json.dump(result, f, indent=2)
    print(json.dumps({k: v for k, v in result.items() if k != "runs"}, indent=2))


if __name__ == "__main__":
    main()
