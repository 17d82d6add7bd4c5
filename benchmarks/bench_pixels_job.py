"""Pixel job throughput against the decoder's floor: marginal frames per second.

    python benchmarks/bench_pixels_job.py --json bench_pixels_job.json \\
        [--videos 3] [--big_videos 12] [--frames 161] [--kinds jpeg,mp4] \\
        [--contenders floor,job,job_exact,job_all_cores] [--repeats 3] [--work_dir DIR]

Writes --big_videos videos of --frames 540x960 frames (benchmarks/pixel_sample.py; 161
frames a video, as in the second user story) in two input kinds: `jpeg`, a folder of
JPEG files (quality 90) a video, and `mp4`, the same frames as one h264 mp4 a video
(libx264, yuv420p, CRF 23, 25 fps); and for each kind two manifests, of the first
--videos videos (small) and of all --big_videos (big). Then it times, in turns (each
round: small then big, each kind, each contender), --repeats runs of each contender on
each manifest. Every run is a subprocess, so each wall time includes its start-up:

  floor          `python benchmarks/bench_pixels_job.py --inner floor ...`: the decoder's
                 floor, one process that only decodes, resizes and encodes each frame, with
                 the job's own code (beam_jobs/sources/media.py and video_files.py,
                 --resize fast): a JPEG
                 through `FrameCodec.store_bytes` (Pillow `draft` to the smallest DCT scale
                 at least 270x480, then Lanczos for the rest), a video frame through
                 `video_files.video_images` (PyAV, swscale scaling it to 270x480 as it
                 converts it to RGB) then `FrameCodec.store_image`; stored as JPEG quality 90 (and
                 each frame's histogram made, as the job makes it), counted,
                 dropped. No windows, no Examples, no shards, no TensorFlow import
                 (importing beam_jobs.sources imports Beam: start-up, which cancels).
  job            `python -m beam_jobs.make_shards --input MANIFEST --output_dir DIR --window
                 16 --stride 8 --frame_size 270x480 --frame_encoding jpeg --num_shards 4
                 --overwrite`: one worker, FnApiRunner in-process, --resize fast (the
                 default)
  job_exact      the same with --resize exact: the job as it was before the fast path
                 (ef32721), byte for byte (pinned in tests/test_pinned_bytes.py), so no
                 older commit is checked out for it
  job_all_cores  the same as `job` with --all_cores (two threads on 2 cores for pixels)
  job_2w         (not by default) --direct_num_workers 2 --direct_running_mode
                 multi_processing
  job_2t         (not by default) --direct_num_workers 2 --direct_running_mode
                 multi_threading
  loop           (not by default) `python benchmarks/bench_pixels_job.py --inner loop ...`:
                 the plain loop as the job was before the fast path: Pillow decodes each
                 JPEG at full size (a video frame: PyAV, full-size RGB), resizes it to
                 480x270 (LANCZOS) and encodes it as JPEG quality 90, once; cuts windows of
                 16 every 8 (plus one ending at the last frame, as --tail align_end), builds
                 a tf.train.Example per window (the 16 JPEGs, mask, labels, video_id,
                 start) and writes it with tf.io.TFRecordWriter to one file.

A contender's marginal rate is (big frames - small frames) / (median wall at big - median
wall at small): start-up, pipeline set-up and shutdown cancel. The table shows it per
contender and kind, with its ratio to the floor's, and the figures for the targets of
issue 47: job / floor >= 0.6 for jpeg and mp4, job / job_exact >= 2.5 for jpeg; and
job_all_cores / job, two workers against one. floor and loop also time their work alone,
after their imports ("in-process" frames/s, at the big size).

Every 0.2 s the CPU time of each process of a run's tree is read, to see how the work was
spread (printed per run: m = main process, w = SDK worker, c = other child); the CPU
seconds that other processes of the machine used meanwhile are shown as noise, and before
each run the script waits (up to --quiet_wait_s) for the machine to be quiet, and redoes
(--retries times at most) a run during which they used over 0.15 of a core. --json gets
every run's wall time and figures, and the summary.
"""
from __future__ import annotations

import argparse
import io
import json
import os
import statistics
import sys
import tempfile
import time

from pixel_sample import frame_bytes, frame_paths, write_frame_manifest
from process_tree import MB, QUIET_PERCENT, REPO, run_tree, wait_for_quiet

WINDOW, STRIDE = 16, 8
FRAME_SIZE = (270, 480)   # H, W
JPEG_QUALITY = 90
NUM_SHARDS = 4
VIDEO_RATE = 25
KINDS = ("jpeg", "mp4")
# issue 47's targets: (numerator, denominator, kinds) -> the least ratio of marginal rates
TARGETS = {("job", "floor"): (0.6, ("jpeg", "mp4")), ("job", "job_exact"): (2.5, ("jpeg",))}
JOB_FLAGS = ["--window", str(WINDOW), "--stride", str(STRIDE),
             "--frame_size", f"{FRAME_SIZE[0]}x{FRAME_SIZE[1]}", "--frame_encoding", "jpeg",
             "--num_shards", str(NUM_SHARDS), "--overwrite"]
JOBS = {   # the job's contenders: their flags besides JOB_FLAGS
    "job": [],
    "job_exact": ["--resize", "exact"],
    "job_all_cores": ["--all_cores"],
    "job_2w": ["--direct_num_workers", "2", "--direct_running_mode", "multi_processing"],
    "job_2t": ["--direct_num_workers", "2", "--direct_running_mode", "multi_threading"],
}
INNER = ("floor", "loop")   # contenders that are this script, --inner NAME
DEFAULT_CONTENDERS = ("floor", "job", "job_exact", "job_all_cores")
NOISY_SHARE = 0.15     # others' CPU seconds per wall second above which a run is redone


# --- the inputs ---------------------------------------------------------------------

def write_mp4_manifest(directory: str, videos: int, frames: int) -> str:
    """One h264 mp4 a video, of the frames pixel_sample writes for it (written first if
    missing), and their manifest {"video_id", "video", "labels"}; an mp4 already there is
    kept."""
    import av
    from PIL import Image

    folders = write_frame_manifest(directory, videos, frames)
    with open(folders) as f:
        rows = [json.loads(line) for line in f if line.strip()]
    os.makedirs(os.path.join(directory, f"mp4-{frames}"), exist_ok=True)
    for v, row in enumerate(rows):
        path = os.path.join(directory, f"mp4-{frames}", f"v{v:03d}.mp4")
        if not os.path.exists(path):
            partial = path + ".partial.mp4"
            with av.open(partial, "w") as container:
                stream = container.add_stream("libx264", rate=VIDEO_RATE)
                stream.pix_fmt = "yuv420p"
                for t, frame in enumerate(frame_paths(row["frames"])):
                    with Image.open(frame) as image:
                        if t == 0:
                            stream.width, stream.height = image.size
                        container.mux(stream.encode(av.VideoFrame.from_image(image.convert("RGB"))))
                container.mux(stream.encode())
            os.replace(partial, path)
        row["video"] = path
        del row["frames"]
    manifest = os.path.join(directory, f"mp4-{videos}x{frames}.jsonl")
    with open(manifest, "w") as f:
        f.writelines(json.dumps(row) + "\n" for row in rows)
    return manifest


def input_of(kind: str, directory: str, videos: int, frames: int) -> tuple[str, int, int]:
    """(manifest, frames, bytes on disk) of `videos` videos of the kind."""
    if kind == "jpeg":
        manifest = write_frame_manifest(directory, videos, frames)
        return (manifest, *frame_bytes(manifest))
    manifest = write_mp4_manifest(directory, videos, frames)
    with open(manifest) as f:
        files = [json.loads(line)["video"] for line in f if line.strip()]
    return manifest, videos * frames, sum(os.path.getsize(p) for p in files)


# --- the floor and the plain loop (each runs in its own process under --inner) ------

def window_starts(num_frames: int) -> list[int]:
    """Starts of windows of WINDOW frames every STRIDE, plus one ending at the last frame."""
    if num_frames < WINDOW:
        return []
    starts = list(range(0, num_frames - WINDOW + 1, STRIDE))
    if starts[-1] != num_frames - WINDOW:
        starts.append(num_frames - WINDOW)
    return starts


def _rows(manifest: str) -> list[dict]:
    with open(manifest) as f:
        return [json.loads(line) for line in f if line.strip()]


def floor_frames(manifest: str):
    """Each frame of the manifest stored as the job's --resize fast stores it (JPEG q90),
    by the job's own functions: the same decode work, and the histogram of its pixels the
    job counts for the dataset's statistics, without windows or shards."""
    sys.path.insert(0, REPO)
    from beam_jobs.sources import media, video_files

    codec = media.FrameCodec(FRAME_SIZE, encoding="jpeg", jpeg_quality=JPEG_QUALITY,
                             resize=True, fast_resize=True)
    for row in _rows(manifest):
        if "video" in row:
            for image, _ in video_files.video_images(row["video"], orient=codec.orient,
                                                     size=codec.video_scale()):
                yield codec.store_image(image)
        else:
            for path in frame_paths(row["frames"]):
                yield codec.store_bytes(media.read_bytes(path))


def _encoded(image) -> bytes:
    from PIL import Image

    if image.mode != "RGB":  # as the job: converting an RGB image copies it, ~4 ms here
        image = image.convert("RGB")
    image = image.resize(FRAME_SIZE[::-1], Image.Resampling.LANCZOS)
    buffer = io.BytesIO()
    image.save(buffer, "JPEG", quality=JPEG_QUALITY)
    return buffer.getvalue()


def exact_frames(row: dict) -> list[bytes]:
    """A video's frames as the job stored them before the fast path: decoded at full size
    (a video frame: full-size RGB), LANCZOS, JPEG q90."""
    from PIL import Image

    if "video" in row:
        import av

        with av.open(row["video"]) as container:
            stream = container.streams.video[0]
            stream.thread_type = "AUTO"
            return [_encoded(frame.to_image()) for frame in container.decode(stream)]
    frames = []
    for path in frame_paths(row["frames"]):
        with open(path, "rb") as f:
            frames.append(_encoded(Image.open(io.BytesIO(f.read()))))
    return frames


def plain_loop(manifest: str, output: str) -> dict:
    """Every video of the manifest -> window Examples in one TFRecord file."""
    import tensorflow as tf

    def floats(values) -> tf.train.Feature:
        return tf.train.Feature(float_list=tf.train.FloatList(value=values))

    windows = 0
    with tf.io.TFRecordWriter(output) as writer:
        for row in _rows(manifest):
            frames = exact_frames(row)
            labels, video_id = row["labels"], row["video_id"].encode("utf-8")
            for start in window_starts(len(frames)):
                example = tf.train.Example(features=tf.train.Features(feature={
                    "window": tf.train.Feature(bytes_list=tf.train.BytesList(
                        value=frames[start:start + WINDOW])),
                    "mask": floats([1.0] * WINDOW),
                    "labels": floats(labels[start:start + WINDOW]),
                    "video_id": tf.train.Feature(bytes_list=tf.train.BytesList(value=[video_id])),
                    "start": tf.train.Feature(int64_list=tf.train.Int64List(value=[start])),
                }))
                writer.write(example.SerializeToString())
                windows += 1
    return {"windows": windows, "bytes": os.path.getsize(output)}


def inner_main(name: str, manifest: str, output: str) -> None:
    """--inner floor|loop: import what it needs (counted in the subprocess's wall time),
    then time its work alone."""
    if name == "loop":
        import tensorflow  # noqa: F401  (the loop's start-up cost, as the job's)
    else:
        sys.path.insert(0, REPO)
        from beam_jobs.sources import media, video_files  # noqa: F401
    start = time.perf_counter()
    if name == "loop":
        result = plain_loop(manifest, output)
    else:
        sizes = [len(data) for data in floor_frames(manifest)]
        result = {"windows": 0, "frames_out": len(sizes), "bytes": sum(sizes)}
    result["inner_s"] = time.perf_counter() - start
    print("INNER_RESULT " + json.dumps(result), flush=True)


# --- the benchmark ------------------------------------------------------------------

def run_contender(name: str, manifest: str, work_dir: str, tag: str) -> dict:
    out = os.path.join(work_dir, f"out-{name}")
    log = os.path.join(work_dir, f"{name}-{tag}.log")
    if name in INNER:
        os.makedirs(out, exist_ok=True)
        run = run_tree([sys.executable, os.path.abspath(__file__), "--inner", name,
                        "--manifest", manifest, "--output",
                        os.path.join(out, "windows.tfrecord")], log)
        inner = [line for line in run.pop("output").splitlines()
                 if line.startswith("INNER_RESULT ")]
        run.update(json.loads(inner[-1][len("INNER_RESULT "):]))
        return run
    run = run_tree([sys.executable, "-m", "beam_jobs.make_shards", "--input", manifest,
                    "--output_dir", out, *JOB_FLAGS, *JOBS[name]], log)
    run.pop("output")
    with open(os.path.join(out, "dataset.json")) as f:
        split = json.load(f)["splits"]["train"]
    run["windows"] = split["windows"]
    run["bytes"] = sum(os.path.getsize(os.path.join(out, s["file"])) for s in split["shards"])
    return run


def _cpu_text(run: dict) -> str:
    return " ".join(f"{p['role'][0]}{p['cpu_s']:.0f}" for p in run["procs"][:3])


def run_quietly(name: str, manifest: str, work_dir: str, tag: str, quiet_wait_s: float,
                retries: int, discarded: list[dict]) -> dict:
    """A run during which other processes used under NOISY_SHARE of a core, or the last
    of 1 + `retries` tries; the noisy ones go to `discarded`."""
    for attempt in range(retries + 1):
        waited = wait_for_quiet(quiet_wait_s)
        run = run_contender(name, manifest, work_dir, tag)
        run["waited_for_quiet_s"] = round(waited, 1)
        if run["others_cpu_s"] <= NOISY_SHARE * run["wall_s"] or attempt == retries:
            return run
        print(f"  {name}: others used {run['others_cpu_s']:.0f} CPU s in {run['wall_s']:.0f} s; "
              "run again", flush=True)
        discarded.append({"contender": name, "tag": tag, "wall_s": run["wall_s"],
                          "others_cpu_s": run["others_cpu_s"], "cpu_s": run["cpu_s"]})
    raise AssertionError("unreachable")


def run_rounds(inputs: dict, work_dir: str, repeats: int, names: list[str],
               quiet_wait_s: float, retries: int, discarded: list[dict]) -> dict:
    """inputs: {kind: {size: (manifest, frames)}}; runs: {kind: {size: {name: [run]}}}."""
    runs = {kind: {size: {name: [] for name in names} for size in by_size}
            for kind, by_size in inputs.items()}
    for r in range(repeats):
        for size in ("small", "big"):
            for kind, by_size in inputs.items():
                manifest, frames = by_size[size]
                for name in names:
                    run = run_quietly(name, manifest, work_dir, f"{kind}-{size}-{r + 1}",
                                      quiet_wait_s, retries, discarded)
                    run["frames_per_s"] = frames / run["wall_s"]
                    inner = " " * 22
                    if "inner_s" in run:
                        run["inner_frames_per_s"] = frames / run["inner_s"]
                        inner = f" (work alone {run['inner_s']:5.1f} s)"
                    runs[kind][size][name].append(run)
                    print(f"round {r + 1} {kind:4s} {size:5s} {name:13s} {run['wall_s']:6.1f} s"
                          f"{inner} {run['frames_per_s']:6.1f} frames/s, {run['windows']} "
                          f"windows, peak {run['peak_mb']:5.0f} MB, cpu s {run['cpu_s']:4.0f} "
                          f"[{_cpu_text(run)}], others {run['others_cpu_s']:3.0f}", flush=True)
    return runs


def _median(runs: list[dict], key: str) -> float:
    return statistics.median(r[key] for r in runs)


def summarize(runs: dict, frames: dict[str, dict[str, int]]) -> dict:
    """Per kind and contender: median walls at each size, the marginal rate, its ratio
    to the floor's; the targets' ratios."""
    summary: dict = {"median_wall_s": {}, "median_cpu_s": {}, "marginal_frames_per_s": {},
                     "marginal_ratio_to_floor": {}, "in_process_frames_per_s": {},
                     "ratios": {}, "targets_met": {}}
    for kind, by_size in runs.items():
        walls = {size: {name: _median(rs, "wall_s") for name, rs in by_name.items()}
                 for size, by_name in by_size.items()}
        summary["median_wall_s"][kind] = walls
        summary["median_cpu_s"][kind] = {
            size: {name: _median(rs, "cpu_s") for name, rs in by_name.items()}
            for size, by_name in by_size.items()}
        extra = frames[kind]["big"] - frames[kind]["small"]
        marginal = {}
        for name in by_size["big"]:
            seconds = walls["big"][name] - walls["small"][name]
            marginal[name] = extra / seconds if seconds > 0 else None  # None: noise won
        summary["marginal_frames_per_s"][kind] = marginal
        floor = marginal.get("floor")
        summary["marginal_ratio_to_floor"][kind] = {
            name: (rate / floor if rate and floor else None) for name, rate in marginal.items()}
        summary["in_process_frames_per_s"][kind] = {
            name: _median(rs, "inner_frames_per_s") for name, rs in by_size["big"].items()
            if rs and "inner_frames_per_s" in rs[0]}
        pairs = [(a, b) for (a, b), (_, kinds) in TARGETS.items() if kind in kinds]
        pairs += [("job", "job_exact"), ("job_all_cores", "job"), ("job", "loop"),
                  ("job_2w", "job"), ("job_2t", "job")]
        ratios = summary["ratios"].setdefault(kind, {})
        for a, b in pairs:
            if marginal.get(a) and marginal.get(b) and f"{a}/{b}" not in ratios:
                ratios[f"{a}/{b}"] = marginal[a] / marginal[b]
        for (a, b), (target, kinds) in TARGETS.items():
            if kind in kinds and f"{a}/{b}" in ratios:
                summary["targets_met"][f"{kind} {a}/{b}"] = ratios[f"{a}/{b}"] >= target
    return summary


def _f(value, spec: str) -> str:
    return "-" if value is None else format(value, spec)


def print_table(runs: dict, summary: dict, frames: dict, videos: dict) -> None:
    repeats = len(next(iter(next(iter(runs.values()))["big"].values())))
    print(f"\nmedians of {repeats} runs; small: {videos['small']} videos, big: "
          f"{videos['big']} videos; marginal f/s = (big frames - small frames) / "
          "(median wall big - median wall small)")
    print(f"{'contender':13s} {'kind':4s} {'wall small':>10s} {'wall big':>9s} "
          f"{'marg. f/s':>10s} {'x floor':>8s} {'big f/s':>8s} {'in-proc f/s':>11s} "
          f"{'windows':>8s} {'MB out':>7s} {'peak MB':>8s} {'cpu s big':>9s} {'others cpu s':>13s}")
    for kind, by_size in runs.items():
        for name, rs in by_size["big"].items():
            walls = {size: summary["median_wall_s"][kind][size][name] for size in by_size}
            others = " ".join(f"{r['others_cpu_s']:.0f}"
                              for size in by_size for r in by_size[size][name])
            print(f"{name:13s} {kind:4s} {walls['small']:10.1f} {walls['big']:9.1f} "
                  f"{_f(summary['marginal_frames_per_s'][kind][name], '.1f'):>10s} "
                  f"{_f(summary['marginal_ratio_to_floor'][kind][name], '.2f'):>8s} "
                  f"{frames[kind]['big'] / walls['big']:8.1f} "
                  f"{_f(summary['in_process_frames_per_s'][kind].get(name), '.1f'):>11s} "
                  f"{rs[0]['windows']:8d} {rs[0]['bytes'] / MB:7.1f} "
                  f"{_median(rs, 'peak_mb'):8.0f} "
                  f"{summary['median_cpu_s'][kind]['big'][name]:9.0f} {others:>13s}")
    for kind, ratios in summary["ratios"].items():
        for key, value in ratios.items():
            a, b = key.split("/")
            target = TARGETS.get((a, b))
            verdict = ""
            if target is not None and kind in target[1]:
                verdict = (f"  (target >= {target[0]}x: "
                           f"{'met' if summary['targets_met'][f'{kind} {key}'] else 'MISSED'})")
            label = {"job_all_cores/job": " (two workers against one)"}.get(key, "")
            print(f"{kind:4s} {key:18s} {value:5.2f}x marginal{verdict}{label}")
    missing = [f"{kind} {a}/{b}" for (a, b), (_, kinds) in TARGETS.items() for kind in kinds
               if kind in runs and f"{a}/{b}" not in summary["ratios"].get(kind, {})]
    if missing:
        print("not measured (a contender left out, or its big run no slower than its small "
              "one): " + ", ".join(missing))
    print("in-proc f/s: floor's and loop's work alone after their imports, big size. "
          "others cpu s: CPU seconds other processes of the machine used during each run "
          "(small runs, then big; noise)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--videos", type=int, default=3, help="videos at the small size")
    parser.add_argument("--big_videos", type=int, default=None,
                        help="videos at the big size (default: 4 x --videos)")
    parser.add_argument("--frames", type=int, default=161, help="frames per video")
    parser.add_argument("--kinds", default=",".join(KINDS),
                        help="comma-separated input kinds (default: %(default)s)")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--contenders", default=",".join(DEFAULT_CONTENDERS),
                        help=f"comma-separated, of {', '.join([*INNER, *JOBS])} "
                             "(default: %(default)s)")
    parser.add_argument("--quiet_wait_s", type=float, default=30.0,
                        help="before each run, wait up to this long for other processes "
                             f"to use under {QUIET_PERCENT}%% of the CPUs (default: %(default)s)")
    parser.add_argument("--retries", type=int, default=1,
                        help="redo a run this many times at most while other processes used "
                             f"over {NOISY_SHARE} of a core during it (default: %(default)s)")
    parser.add_argument("--json", help="where the results go (required)")
    parser.add_argument("--work_dir", default=None,
                        help="where the data is written (default: a temp dir, removed after)")
    parser.add_argument("--inner", choices=INNER, help=argparse.SUPPRESS)
    parser.add_argument("--manifest", help=argparse.SUPPRESS)
    parser.add_argument("--output", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.inner:
        inner_main(args.inner, args.manifest, args.output)
        return
    if not args.json:
        parser.error("--json is required")
    names = args.contenders.split(",")
    if not names or any(n not in INNER and n not in JOBS for n in names):
        parser.error(f"--contenders: some of {[*INNER, *JOBS]}")
    kinds = args.kinds.split(",")
    if not kinds or any(k not in KINDS for k in kinds):
        parser.error(f"--kinds: some of {list(KINDS)}")
    videos = {"small": args.videos, "big": args.big_videos or 4 * args.videos}
    if videos["big"] <= videos["small"]:
        parser.error("--big_videos must be more than --videos")

    with tempfile.TemporaryDirectory() as temp_dir:
        work_dir = args.work_dir or temp_dir
        inputs, frames, config_inputs = {}, {}, {}
        for kind in kinds:
            start = time.perf_counter()
            inputs[kind], frames[kind] = {}, {}
            for size in ("big", "small"):   # big first: small reuses its files
                manifest, count, nbytes = input_of(kind, work_dir, videos[size], args.frames)
                inputs[kind][size] = (manifest, count)
                frames[kind][size] = count
                config_inputs[f"{kind} {size}"] = {"videos": videos[size], "frames": count,
                                                   "bytes": nbytes}
            big = config_inputs[f"{kind} big"]
            print(f"{kind}: {big['frames']} frames, {big['bytes'] / big['frames'] / 1024:.0f} "
                  f"KB per frame, written in {time.perf_counter() - start:.0f} s", flush=True)
        discarded: list[dict] = []
        runs = run_rounds(inputs, work_dir, args.repeats, names, args.quiet_wait_s,
                          args.retries, discarded)

    summary = summarize(runs, frames)
    print_table(runs, summary, frames, videos)
    if discarded:
        print(f"{len(discarded)} noisy runs redone: "
              + ", ".join(f"{d['contender']} ({d['others_cpu_s']:.0f} s)" for d in discarded))
    with open(args.json, "w") as f:
        json.dump({"config": {"videos": videos, "frames_per_video": args.frames,
                              "inputs": config_inputs, "repeats": args.repeats,
                              "job_flags": JOB_FLAGS,
                              "contenders": {n: JOBS.get(n, f"--inner {n}") for n in names},
                              "cpus": os.cpu_count()},
                   "runs": runs, "discarded_noisy_runs": discarded, **summary}, f, indent=2)
    print(f"wrote {args.json}")


if __name__ == "__main__":
    main()
