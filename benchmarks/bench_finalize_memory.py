"""Peak memory of the whole job (its process tree) with many small videos, at 1x and 4x
the videos: what gathering the per-video rows at the end costs; this tree's code against
an older commit's, in the same run.

    python benchmarks/bench_finalize_memory.py --json bench_finalize_memory.json \\
        [--videos 2000] [--repeats 1] [--baseline f6c515c] [--work_dir DIR] [JOB FLAGS ...]

Writes a latent sample of s * --videos videos for s in (1, 4) (150 frames of 16 floats
each: two windows of 100 with stride 50, 6.4 KB a window), over 4 * s files. Then, in
turns (--repeats rounds; in each, every code version at 1x then 4x) runs
`python -m beam_jobs.make_shards --input ... --output_dir ... --window 100 --stride 50
--splits train=0.9,test=0.1 --overwrite [JOB FLAGS]` from this tree (HEAD+) and from
--baseline (`git archive` of that commit; the code before per-video rows stopped being
gathered into one element), measuring the peak RSS of the job's process and all its
descendants (benchmarks/process_tree.py). The table shows the median peak per version
and scale and the ratio 4x / 1x (target <= 1.1). Any flag this script does not know is
passed to the job.
"""
from __future__ import annotations

import json
import os
import tempfile

from job_versions import compare, parser_with_versions, peak_table, versions_of

from beam_jobs.sample import write_latent_sample

SCALES = (1, 4)
FILES_PER_SCALE = 4
FRAMES, DIM = 150, 16
TARGET_RATIO = 1.1


def main() -> None:
    parser = parser_with_versions(__doc__)
    parser.add_argument("--videos", type=int, default=2000, help="videos at 1x")
    args, job_flags = parser.parse_known_args()
    versions = versions_of(args)
    with tempfile.TemporaryDirectory() as temp_dir:
        work_dir = args.work_dir or temp_dir
        jobs = {}
        for s in SCALES:
            write_latent_sample(os.path.join(work_dir, f"latents-{s}x"), videos=s * args.videos,
                                files=s * FILES_PER_SCALE, dim=DIM, frames=(FRAMES, FRAMES + 1))
            jobs[f"{s}x"] = [
                "--input", os.path.join(work_dir, f"latents-{s}x", "*.tfrecord"),
                "--output_dir", os.path.join(work_dir, f"out-{s}x"),
                "--window", "100", "--stride", "50", "--splits", "train=0.9,test=0.1",
                *job_flags]
        runs = compare(versions, jobs, work_dir, args.repeats)
    print(f"\njob flags: {' '.join(job_flags) or '(none)'}; videos at 1x: {args.videos}")
    peaks = peak_table(runs, "1x", "4x", TARGET_RATIO)
    with open(args.json, "w") as f:
        json.dump({"config": {"videos_1x": args.videos, "repeats": args.repeats,
                              "frames": FRAMES, "dim": DIM, "job_flags": job_flags,
                              "cpus": os.cpu_count()},
                   "median_peak_mb": peaks, "runs": runs}, f)
    print(f"wrote {args.json}")


if __name__ == "__main__":
    main()
