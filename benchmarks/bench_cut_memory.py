"""Peak memory of the job (its process tree) cutting one long raw-pixel video, at 1x and
10x its length: whether the cut holds a video's windows; this tree's code against an
older commit's, in the same run.

    python benchmarks/bench_cut_memory.py --json bench_cut_memory.json \\
        [--frames 100] [--repeats 1] [--baseline f6c515c] [--work_dir DIR] [JOB FLAGS ...]

Writes one frame folder of 10 * --frames 540x960 JPEGs (benchmarks/pixel_sample.py)
and manifests of one video: its first --frames frames (1x), and all of them (10x).
Then, in turns (--repeats rounds; in each, every code version at 1x then 10x) runs
`python -m beam_jobs.make_shards --input MANIFEST --output_dir ... --window 8 --stride 4
--frame_encoding raw --frame_size 270x480 --overwrite [JOB FLAGS]` (a window: 8 raw
frames of 389 KB, 3.1 MB) from this tree (HEAD+) and from --baseline (`git archive` of
that commit, whose cut held a video's examples until its last frame), measuring the peak
RSS of the job's process and all its descendants (benchmarks/process_tree.py). The table
shows the median peak per version and length and the ratio 10x / 1x (target: flat,
<= 1.1). Any flag this script does not know is passed to the job.
"""
from __future__ import annotations

import json
import os
import tempfile

from job_versions import compare, parser_with_versions, peak_table, versions_of
from pixel_sample import frame_paths, write_frame_manifest

LENGTHS = (1, 10)
TARGET_RATIO = 1.1


def _manifests(work_dir: str, frames: int) -> dict[str, str]:
    """{"1x": manifest, "10x": manifest}: one video of the first `frames` * s frames."""
    full = write_frame_manifest(work_dir, 1, frames * max(LENGTHS))
    with open(full) as f:
        row = json.loads(f.readline())
    paths = frame_paths(row["frames"])
    manifests = {}
    for s in LENGTHS:
        manifests[f"{s}x"] = os.path.join(work_dir, f"long-{s}x.jsonl")
        with open(manifests[f"{s}x"], "w") as f:
            f.write(json.dumps({"video_id": "long", "frames": paths[:s * frames],
                                "labels": row["labels"][:s * frames]}) + "\n")
    return manifests


def main() -> None:
    parser = parser_with_versions(__doc__)
    parser.add_argument("--frames", type=int, default=100, help="the video's frames at 1x")
    args, job_flags = parser.parse_known_args()
    versions = versions_of(args)
    with tempfile.TemporaryDirectory() as temp_dir:
        work_dir = args.work_dir or temp_dir
        jobs = {length: ["--input", manifest, "--output_dir",
                         os.path.join(work_dir, f"out-{length}"), "--window", "8",
                         "--stride", "4", "--frame_encoding", "raw", "--frame_size",
                         "270x480", *job_flags]
                for length, manifest in _manifests(work_dir, args.frames).items()}
        runs = compare(versions, jobs, work_dir, args.repeats)
    print(f"\njob flags: {' '.join(job_flags) or '(none)'}; frames at 1x: {args.frames}")
    peaks = peak_table(runs, "1x", "10x", TARGET_RATIO)
    with open(args.json, "w") as f:
        json.dump({"config": {"frames_1x": args.frames, "repeats": args.repeats,
                              "job_flags": job_flags, "cpus": os.cpu_count()},
                   "median_peak_mb": peaks, "runs": runs}, f)
    print(f"wrote {args.json}")


if __name__ == "__main__":
    main()
