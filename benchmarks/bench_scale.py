"""The shuffle at scale: temp objects, GCS requests and bytes, measured, fitted, projected.

    python benchmarks/bench_scale.py --json bench_scale.json [--sizes 24,96,384]
        [--buckets_mb 32,128,256] [--work_dir DIR]

1. Measured, both modes, at each of --sizes latent videos (832 x 200 float32
   serialized-tensor records; windows of 100 every 50: 16 windows, 1.3 MB of output a
   video). The job runs in this process on FnApiRunner, its input local, its output on a
   GCS emulator served from this process (tests/gcs_emulator.py counts every request). The
   shuffle is scaled down 32 times (buckets of 4 MB, spill buffers of 1 MB, shards of
   6.25 MB, ranged reads of 256 KB), so that these sizes have the bucket, spill, shard and
   read counts of runs 32 times as large with the defaults (128 MB, 32 MB, 200 MB, 8 MB).
   Counted: temp files (the job's Beam counters), requests by kind, temp bytes a shard
   task reads per shard byte it writes, wall time, and the output's objects: shards and
   the offset index beside each uncompressed shard (`<shard>.index`, a real GCS object
   with its own create and upload requests), with their bytes. Spill mode keeps its temp
   data on local disk (a local runner); group mode keeps it under the output directory, on
   GCS, as on Dataflow.
2. Measured: one shard task in a fresh process writing a 200 MB shard from bucket files
   of --buckets_mb on the emulator, in group mode (one sorted file per bucket: streamed)
   and spill mode (each bucket in two runs: sorted in memory), its peak RSS above the
   interpreter's after imports.
3. Estimated, for `--shuffle group` with the defaults on 100 workers: the fire videos
   (5 GB of JPEG windows), and 2 TB and 20 TB of latent INPUT at window 100 / stride 50
   (the windows' bytes are the input's times the output-per-input ratio part 1 measured:
   overlapping windows store each frame about twice). Objects are counted from the data's
   size: one temp object per bucket, one shard per 200 MB (at most 99,999 a split), one
   index object beside each shard. Creates are one per object; uploads ceil(size / 16 MB)
   per object (Beam uploads in 16 MB chunks); deletes one batch request per 100 temp
   objects (the deletion lists the prefix, one list request per 1,000 objects, and
   deletes in batches of 100, as measured in docs/dataflow.md); reads and metadata gets per temp
   object fitted to part 1's group-mode runs (least squares). Bytes: group mode writes
   the windows twice (the bucket files, then the shards) and reads them back once,
   besides reading the input. Costs at the list prices below; Dataflow Shuffle carries
   the windows once.
4. Measured: plan_shards on synthetic rows (one sorted file per bucket, as group mode
   gives) for the bucket count of each size, 10,000 dropped keys, timed once.
"""
from __future__ import annotations

import argparse
import json
import math
import os
import subprocess
import sys
import tempfile
import time

import numpy as np

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(REPO, "tests"))

import gcs_emulator  # noqa: E402  (tests/ helper: the emulator with request counts)

MB = 2**20
SCALE_DOWN = 32
JOB_FLAGS = ["--window", "100", "--stride", "50", "--shuffle_bucket_mb", "4",
             "--spill_buffer_mb", "1", "--shard_size_mb", "6.25"]
RANGE_CHUNK_SCALED = 256 << 10   # streams.RANGE_CHUNK (8 MB) / 32
BEAM_UPLOAD_CHUNK = 16 * MB      # Beam's GCS writer uploads in chunks of this size
VIDEO_OUTPUT_BYTES = 16 * (100 * 200 * 4 + 200)      # 16 windows of 100 x 200 float32
DEFAULTS = {"bucket": 128 * MB, "spill": 32 * MB, "shard": 200 * MB}
WORKERS = 100
# List prices assumed (USD, us-central1; GCS's as cloud.google.com/storage/pricing lists
# them, checked 2026-12-01; Dataflow Shuffle's from cloud.google.com/dataflow/pricing, not
# re-checked): GCS Standard class A operations (object inserts, each upload request
# counted as one, and lists) $0.005 per 1,000; class B (object gets and metadata) $0.0004
# per 1,000; deletes are free operations; network between a bucket and workers in the
# same region is free. Dataflow Shuffle (batch) $0.011 per GB of shuffle data processed,
# before its tiered discounts on the first 5 TB of a job (so an upper bound). Latencies
# are typical, not measured.
CLASS_A_PER_1000 = 0.005
CLASS_B_PER_1000 = 0.0004
SHUFFLE_PER_GB = 0.011
DELETE_BATCH = 100           # deletes per batch request (Beam's GCS filesystem)
LIST_PAGE = 1000             # objects per list request
LATENCY_S = {"create": 0.05, "upload": 0.05, "read": 0.03, "metadata": 0.02,
             "list": 0.05, "batch": 0.2, "delete": 0.03}
TARGETS = {"temp objects at 2 TB": 20_000, "delete requests per 100 objects": 1.0,
           "shard-task MB": 256, "bytes read per byte written": 1.1}
# name -> (input bytes, or None where only the windows' bytes are known; windows' bytes
# when no input is given). Latent input: 832 x 200 float32 per video, windows of 100
# every 50 (part 1's data, whose output-per-input ratio scales it).
SIZES = {"fire videos (193 x 161 frames of 540x960 as JPEG)": (None, 5e9),
         "2 TB of latent input": (2e12, None), "20 TB of latent input": (20e12, None)}
# Bytes of one stored window with its TFRecord framing, for the index sizes: the fire
# videos' windows hold 32 JPEG frames of 270x480 (about 20 KB each); latent windows are
# 100 x 200 float32 with their mask, as in part 1.
WINDOW_BYTES = {"fire videos (193 x 161 frames of 540x960 as JPEG)": 32 * 20_000,
                "2 TB of latent input": VIDEO_OUTPUT_BYTES // 16,
                "20 TB of latent input": VIDEO_OUTPUT_BYTES // 16}


def _index_bytes(windows: int, shards: int, window_bytes: int) -> int:
    """The text indexes' bytes: one `offset length` line per window (readers.format.index),
    each offset counted at the digits of a shard's size."""
    shard_bytes = math.ceil(windows / shards) * window_bytes
    return windows * (len(str(shard_bytes)) + len(str(window_bytes)) + 2)


_index_uploads = [0]


def _count_index_uploads() -> None:
    """Count the upload requests of `<shard>.index` objects (a resumable upload's id names
    its object); their creates are one per object."""
    kind_of = gcs_emulator._kind

    def kind(method: str, path: str, query: str) -> str:
        found = kind_of(method, path, query)
        if found == "upload" and ".index%3A" in query:
            _index_uploads[0] += 1
        return found

    gcs_emulator._kind = kind


def _output_objects(out: str) -> dict:
    """The shards and index objects a run left in its output directory, with bytes."""
    from apache_beam.io.filesystems import FileSystems

    from readers import format as data_format

    found = {"shard_objects": 0, "shard_bytes": 0, "index_objects": 0, "index_bytes": 0}
    for match in FileSystems.match([out + "/*"]):
        for meta in match.metadata_list:
            name = meta.path.rsplit("/", 1)[-1]
            kind = ("index" if data_format.is_index_name(name)
                    else "shard" if data_format.is_shard_name(name) else None)
            if kind:
                found[f"{kind}_objects"] += 1
                found[f"{kind}_bytes"] += meta.size_in_bytes
    return found


def _run_job(input_glob: str, out: str, mode: str) -> dict:
    from apache_beam.metrics.metric import MetricsFilter

    from beam_jobs import make_shards

    gcs_emulator.reset_counts()
    _index_uploads[0] = 0
    start = time.perf_counter()
    result = make_shards.run(["--input", input_glob, "--output_dir", out, "--shuffle", mode,
                              *JOB_FLAGS])
    wall = time.perf_counter() - start
    counters = {c.key.metric.name: c.committed
                for c in result.metrics().query(MetricsFilter())["counters"]}
    requests = gcs_emulator.counts()
    requests["index_upload"] = _index_uploads[0]
    return {"mode": mode, "wall_s": round(wall, 2), **_output_objects(out),
            "temp_files": counters.get("temp_files_written", 0),
            "temp_bytes_written": counters.get("temp_bytes_written", 0),
            "temp_bytes_read": counters.get("temp_bytes_read", 0),
            "shard_bytes_written": counters.get("shard_bytes_written", 0),
            "requests": requests}


def measure_job(sizes: list[int], work_dir: str) -> list[dict]:
    from beam_jobs.sample import write_latent_sample

    rows = []
    for videos in sizes:
        inputs = os.path.join(work_dir, f"in-{videos}")
        if not os.path.exists(inputs):
            write_latent_sample(inputs, videos=videos, files=max(1, videos // 8),
                                frames=(832, 833))
        for mode in ("spill", "group"):
            row = _run_job(os.path.join(inputs, "*.tfrecord"), f"gs://bkt/out-{mode}-{videos}",
                           mode)
            row.update(videos=videos, output_mb=round(videos * VIDEO_OUTPUT_BYTES / MB, 1),
                       input_bytes=sum(os.path.getsize(os.path.join(inputs, name))
                                       for name in os.listdir(inputs)))
            row["read_per_written"] = round(row["temp_bytes_read"]
                                            / max(1, row["shard_bytes_written"]), 3)
            rows.append(row)
            print(json.dumps(row), flush=True)
    return rows


_SHARD_TASK = r"""
import json, os, sys, threading, time
import psutil
sys.path.insert(0, {tests!r})
import gcs_emulator
gcs_emulator.anonymous_beam()
from beam_jobs.core.run_dir import RunDir
from beam_jobs.shuffle.write import WriteShard
from beam_jobs.shuffle.plan import FileSpan, Segment, ShardTask
process = psutil.Process()
base = process.memory_info().rss
peak = [base]
stop = threading.Event()
def sample():
    while not stop.wait(0.02):
        peak[0] = max(peak[0], process.memory_info().rss)
threading.Thread(target=sample, daemon=True).start()
task = ShardTask("train", 0, 1, tuple(Segment(b, tuple(FileSpan(*f) for f in files), lo, hi)
                                     for b, files, lo, hi in json.loads({segments!r})))
start = time.perf_counter()
(written,) = WriteShard(RunDir({out!r}, "0" * 12, ""), "none", {buckets}).process(task)
stop.set()
peak[0] = max(peak[0], process.memory_info().rss)
print(json.dumps({{"examples": written.examples, "peak_mb": (peak[0] - base) / 2**20,
                  "wall_s": time.perf_counter() - start}}))
"""


def measure_shard_task(buckets_mb: list[int], record_bytes: int = 80_000) -> list[dict]:
    """One 200 MB shard task over buckets of each size, in a fresh process."""
    from beam_jobs.shuffle.plan import bucket_of
    from beam_jobs.shuffle.sorted_files import write_sorted

    rows = []
    rng = np.random.default_rng(0)
    for bucket_mb in buckets_mb:
        per_bucket = bucket_mb * MB // record_bytes
        shard_records = DEFAULTS["shard"] // record_bytes
        num_buckets = 1 + math.ceil(shard_records / per_bucket)
        payload = rng.bytes(record_bytes)
        for mode in ("group", "spill"):
            segments, taken = [], 0
            for b in range(num_buckets):
                low = ((b << 64) + num_buckets - 1) // num_buckets
                keys = [low + i for i in range(per_bucket)]
                assert bucket_of(keys[0], num_buckets) == b == bucket_of(keys[-1], num_buckets)
                records = [(k, payload, 0, 0) for k in keys]
                halves = [records] if mode == "group" else [records[0::2], records[1::2]]
                files = []
                for h, part in enumerate(halves):
                    path = f"gs://bkt/scale-{mode}-{bucket_mb}/b{b}-{h}.sorted"
                    write_sorted(path, part)
                    files.append((path, 0, len(part)))
                # a shard starting half-way into the first bucket, as most shards do
                lo = per_bucket // 2 if b == 0 else 0
                hi = min(per_bucket, lo + shard_records - taken)
                if hi > lo:
                    segments.append((b, files, lo, hi))
                    taken += hi - lo
            code = _SHARD_TASK.format(tests=os.path.join(REPO, "tests"),
                                      segments=json.dumps(segments),
                                      out=f"gs://bkt/scale-shards-{mode}-{bucket_mb}",
                                      buckets=num_buckets)
            result = subprocess.run([sys.executable, "-c", code], capture_output=True,
                                    text=True, cwd=REPO, env=os.environ)
            if result.returncode:
                raise RuntimeError(result.stderr[-3000:])
            row = json.loads(result.stdout.strip().splitlines()[-1])
            row.update(mode=mode, bucket_mb=bucket_mb, shard_mb=round(taken * record_bytes / MB))
            rows.append(row)
            print(json.dumps(row), flush=True)
    return rows


def _fit(xs: list[float], ys: list[float]) -> tuple[float, float]:
    """Least squares y = a + b x."""
    b, a = np.polyfit(xs, ys, 1)
    return float(a), float(b)


def measure_plan(buckets: int, window_bytes: int, dropped: int = 10_000) -> float:
    """Seconds plan_shards takes for `buckets` group-mode buckets of the default size."""
    from beam_jobs.shuffle.plan import BucketSpan, SortedFile, plan_shards

    per_bucket = DEFAULTS["bucket"] / 1.1
    files = [SortedFile("train", f"gs://bkt/run/buckets/train-{b:07d}.sorted",
                        (BucketSpan(b, 0, int(per_bucket // window_bytes), int(per_bucket)),))
             for b in range(buckets)]
    keys = frozenset((i * 0x9E3779B97F4A7C15) % 2**64 for i in range(dropped))
    start = time.perf_counter()
    plan_shards(files, ("train",), buckets, None, DEFAULTS["shard"], {"train": keys})
    return time.perf_counter() - start


def project(job_rows: list[dict], task_rows: list[dict]) -> dict:
    """Objects, requests, bytes and costs of `--shuffle group` at the defaults."""
    from beam_jobs.shuffle.plan import num_shards_for

    group = [r for r in job_rows if r["mode"] == "group"]
    per_object = {}
    for kind in ("read", "metadata", "list"):
        a, b = _fit([r["temp_files"] for r in group], [r["requests"].get(kind, 0) for r in group])
        per_object[kind] = {"fixed": round(a, 2), "per_temp_object": round(b, 4)}
    largest = max(group, key=lambda r: r["temp_files"])
    read_ratio = largest["requests"].get("bytes_read", 0) / max(1, largest["shard_bytes_written"])
    output_per_input = largest["shard_bytes_written"] / largest["input_bytes"]
    task_mb = max(r["peak_mb"] for r in task_rows if r["mode"] == "group")
    table = {}
    for name, (input_bytes, windows_bytes) in SIZES.items():
        nbytes = windows_bytes or input_bytes * output_per_input
        buckets = math.ceil(1.1 * nbytes / DEFAULTS["bucket"])
        windows = round(nbytes / WINDOW_BYTES[name])
        shards = num_shards_for(windows, nbytes, None, DEFAULTS["shard"])  # at most 99,999
        index_objects = shards                   # uncompressed shards, the default
        index_bytes = _index_bytes(windows, shards, WINDOW_BYTES[name])
        index_chunks = shards * math.ceil(index_bytes / shards / BEAM_UPLOAD_CHUNK)
        requests = {k: max(0.0, v["fixed"] + v["per_temp_object"] * buckets)
                    for k, v in per_object.items()}
        requests["create"] = buckets + shards + index_objects
        requests["upload"] = (buckets * math.ceil(DEFAULTS["bucket"] / BEAM_UPLOAD_CHUNK)
                              + shards * math.ceil(nbytes / shards / BEAM_UPLOAD_CHUNK)
                              + index_chunks)
        requests["list"] += math.ceil(buckets / LIST_PAGE)
        requests["delete batches"] = math.ceil(buckets / DELETE_BATCH)
        class_a = requests["create"] + requests["upload"] + requests["list"]
        class_b = requests["read"] + requests["metadata"]
        serial = sum(n * LATENCY_S["batch" if k == "delete batches" else k]
                     for k, n in requests.items())
        written = 2 * nbytes + index_bytes       # bucket files, then shards and indexes
        read = (input_bytes or 0) + read_ratio * nbytes
        table[name] = {
            "input GB": round(input_bytes / 1e9) if input_bytes else None,
            "windows GB": round(nbytes / 1e9),
            "temp objects (one per bucket)": buckets,
            "shards": shards,
            "index objects (one per shard)": index_objects,
            "index MB": round(index_bytes / MB, 1),
            "requests": {k: round(v) for k, v in requests.items()},
            "GCS GB written": round(written / 1e9),
            "GCS GB read": round(read / 1e9),
            "GCS operations $": round(class_a / 1000 * CLASS_A_PER_1000
                                      + class_b / 1000 * CLASS_B_PER_1000, 2),
            "Dataflow Shuffle $": round(nbytes / 1e9 * SHUFFLE_PER_GB, 2),
            "request latency if serial, h": round(serial / 3600, 2),
            f"request latency on {WORKERS} workers, min": round(serial / WORKERS / 60, 1),
            "plan_shards s": round(measure_plan(buckets, WINDOW_BYTES[name]), 2),
        }
        print(json.dumps({name: table[name]}), flush=True)
    return {"per_object": per_object,
            "prices": {"GCS class A per 1,000": CLASS_A_PER_1000,
                       "GCS class B per 1,000": CLASS_B_PER_1000,
                       "Dataflow Shuffle per GB": SHUFFLE_PER_GB},
            "measured": {"windows bytes per input byte": round(output_per_input, 3),
                         "GCS bytes read per shard byte written": round(read_ratio, 3),
                         "shard-task peak MB (group)": round(task_mb, 1),
                         "index objects per shard": round(
                             largest["index_objects"] / max(1, largest["shard_objects"]), 2),
                         "index upload requests per index object": round(
                             largest["requests"].get("index_upload", 0)
                             / max(1, largest["index_objects"]), 2),
                         "index bytes per shard byte": round(
                             largest["index_bytes"] / max(1, largest["shard_bytes"]), 6),
                         "shuffle passes": 1},
            "table": table}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--json", required=True)
    parser.add_argument("--sizes", default="24,96,384", help="videos per measured run")
    parser.add_argument("--buckets_mb", default="32,128,256",
                        help="bucket sizes of the shard-task memory runs")
    parser.add_argument("--work_dir", default=None)
    args = parser.parse_args()
    work_dir = args.work_dir or tempfile.mkdtemp(prefix="bench_scale-")
    from beam_jobs.core import streams

    streams.RANGE_CHUNK = RANGE_CHUNK_SCALED
    _count_index_uploads()
    with gcs_emulator.running("bkt"):
        jobs = measure_job([int(s) for s in args.sizes.split(",")], work_dir)
        streams.RANGE_CHUNK = RANGE_CHUNK_SCALED * 32
        tasks = measure_shard_task([int(s) for s in args.buckets_mb.split(",")])
    projection = project(jobs, tasks)
    print(json.dumps(projection, indent=2))
    with open(args.json, "w") as f:
        json.dump({"jobs": jobs, "shard_tasks": tasks, "projection": projection,
                   "targets": TARGETS, "flags": JOB_FLAGS}, f, indent=2)


if __name__ == "__main__":
    main()
