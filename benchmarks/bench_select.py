"""What a selection costs readers.numpy: opening one on a million windows, and reading a
selected epoch against the whole split.

    python benchmarks/bench_select.py --json bench_select.json [--parts open,read] \\
        [--windows 1000000] [--videos 50000] [--shards 400] [--repeats 5] \\
        [--read_videos 2048] [--read_repeats 9] [--work_dir DIR]

1. Open. Makes the index of a dataset of --windows windows (16 frames each, a fire-story
   window: [16, 200] float32 with mask, labels and metadata) of --videos videos, 20
   windows a video, in --shards shards: dataset.json (format 7), each shard's offset
   index and window table, the videos file (one ~410-byte row a video: the job's facts,
   metadata of 4 floats, 4 fields of its manifest row), and the shards as sparse files
   of their size (nothing written in them: a read of one would fail its CRC). Then, each
   in a fresh process, --repeats times, opens `WindowSource(out, "train", select=...)`
   for selections of about 10% of the windows (by video ids, by a predicate on the
   videos file's rows: on the id, a manifest field, the metadata; by min_valid_frames)
   and the fire story's (at
   least 12 valid frames, one experiment of ten held out), and the split without a
   selection: the wall time of the open (medians); the memory it added (the process's
   peak RSS during the open, reset just before it (/proc/self/clear_refs), less its RSS
   before; the largest of the repeats) and the peak of what Python and numpy allocated
   (tracemalloc, over a second open); the bytes it read (/proc/self/io rchar), and that
   no shard and no offset index was opened.
2. Read. Cuts a latent sample of --read_videos videos with the job (bench_reader.py's:
   window 100, stride 50, 16 shards; 2,048 videos give 31,488 windows, 2.5 GB), then
   times epochs of the whole split, of selections of 10% and 50% of the videos, and, as
   controls of an epoch as short without a selection, of one host's tenth and half of
   the whole split (`num_shards=10`, `2`), two ways: `batches(out, "train", 64,
   select=...)` called each epoch (its time includes the open, a fixed cost a short epoch
   feels more), and a source opened once whose `EpochBatches` are read batch by batch
   (`read_batch`). The contenders take turns for --read_repeats rounds, each round in a
   new order, after one warm-up epoch each. Medians of windows/s; each selected epoch's
   rate over the whole split's and over its control's, as a ratio of medians and as the
   median of per-round ratios.
"""
from __future__ import annotations

import argparse
import functools
import json
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time

import numpy as np

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO)

from readers import format as data_format  # noqa: E402
from readers.format import index, video_rows, window_table  # noqa: E402
from readers.format.tfrecord import frame  # noqa: E402

LENGTH, DIM, RUN_ID = 16, 200, "0123456789ab"
EXPERIMENTS = 10
TARGETS = {"open_seconds": 2.0, "open_mb": 100.0, "selected/whole": 0.9}

# name -> the Select the child process opens with (code: `ids` are the videos' ids)
SELECTIONS = {
    "none": "None",
    "10% by video ids": "Select(videos=ids[::10])",
    "10% by a predicate on videos.jsonl rows":
        "Select(where=lambda row: row['video_id'].startswith('exp3/'))",
    "10% by a manifest field": "Select(where=lambda row: row['fields']['experiment'] == 'exp3')",
    "10% by metadata": "Select(where=lambda row: row['metadata'][1] == 3.0)",
    "by min_valid_frames (all 16 frames valid)": "Select(min_valid_frames=16)",
    "fire story (>= 12 valid, exp3 held out)":
        "Select(min_valid_frames=12, where=lambda row: not row['video_id'].startswith('exp3/'))",
}

_CHILD = r"""
import json, os, sys, time, tracemalloc
sys.path.insert(0, {repo!r})
from readers import select as selections
from readers.numpy import Select, WindowSource

def rss():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")

def rchar():
    with open("/proc/self/io") as f:
        return int(next(l for l in f if l.startswith("rchar:")).split()[1])

def peak_rss():   # VmHWM, since the last reset (clear_refs 5)
    with open("/proc/self/status") as f:
        return int(next(l for l in f if l.startswith("VmHWM:")).split()[1]) * 1024

ids = [json.loads(line)["video_id"] for line in open({videos!r})] if "ids" in {code!r} else []
select = eval({code!r})
with open("/proc/self/clear_refs", "w") as f:
    f.write("5")
before, read = rss(), rchar()
start = time.perf_counter()
source = WindowSource({out!r}, "train", select=select)
seconds = time.perf_counter() - start
peak = peak_rss()
read = rchar() - read
del source
selections._RESOLVED.clear()  # a process keeps what it resolved: resolve it again
tracemalloc.start()
again = WindowSource({out!r}, "train", select=select)
traced = tracemalloc.get_traced_memory()[1]
source = again
print(json.dumps({{"seconds": seconds, "added_mb": (peak - before) / 2**20,
                  "traced_peak_mb": traced / 2**20,
                  "split": source.spec.splits["train"].windows,
                  "read_mb": read / 2**20, "windows": len(source),
                  "shards_opened": len(source.shards._files),
                  "indexes_read": len(source.shards._offsets)}}))
"""


def _features() -> list:
    return data_format.window_features(
        data_format.FeatureSpec.for_array("window", (LENGTH, DIM), "float32"),
        metadata_length=2, label_shape=())


def _frame_bytes(features) -> int:
    values = {"window": np.zeros((LENGTH, DIM), np.float32), "mask": np.ones(LENGTH, np.float32),
              "labels": np.zeros(LENGTH, np.float32), "metadata": np.zeros(2, np.float32),
              "video_id": b"exp0/cam0/fire_000000", "start": np.int64(100)}
    return len(frame(data_format.encode_example(features, values)))


def make_index(out: str, windows: int, videos: int, shards: int, seed: int = 0) -> dict:
    """The index of a dataset, without its shards' data (the module's docstring)."""
    os.makedirs(out, exist_ok=True)
    rng = np.random.default_rng(seed)
    features = _features()
    record = _frame_bytes(features)
    ids = sorted(f"exp{i % EXPERIMENTS}/cam{i % 7}/fire_{i:06d}" for i in range(videos))
    of_window = np.repeat(np.arange(videos), -(-windows // videos))[:windows]
    loss = rng.uniform(0, 0.4, videos)            # each video's share of missing frames
    valid = rng.binomial(LENGTH, 1 - loss[of_window])
    order = rng.permutation(windows)               # the job's shuffle: any window anywhere
    hashes = window_table.video_hashes(ids)
    entries, names = [], []
    for k in range(shards):
        mine = order[k * windows // shards:(k + 1) * windows // shards]
        name = data_format.shard_name("train", k, shards, "none", RUN_ID)
        with open(os.path.join(out, name), "wb") as f:
            f.truncate(len(mine) * record)            # sparse: no data written
        text = index.encode(range(0, (len(mine) + 1) * record, record))
        with open(os.path.join(out, data_format.index_name(name)), "wb") as f:
            f.write(text)
        table = window_table.encode(hashes[of_window[mine]], valid[mine], name, text)
        with open(os.path.join(out, data_format.table_name(name)), "wb") as f:
            f.write(table)
        entries.append(data_format.Shard(name, len(mine), data_format.index_name(name),
                                         len(mine) * record, data_format.table_name(name),
                                         window_table.crc32c(table)))
        names += [name, data_format.index_name(name), data_format.table_name(name)]
    counts = np.bincount(of_window, minlength=videos)
    videos_file = data_format.sidecar_name("videos", RUN_ID)
    # what a user knows of each video: a recipe (its experiment second), manifest fields
    metadata = rng.random((videos, 4)).astype(np.float32)
    with open(os.path.join(out, videos_file), "w") as f:
        for i, video_id in enumerate(ids):
            experiment = video_id.split("/")[0]
            metadata[i, 1] = int(experiment[3:])
            f.write(json.dumps({
                "video_id": video_id, "split": "train", "source": f"gs://fires/{video_id}/",
                "record_index": None, "frames": 161, "windows": int(counts[i]),
                "bad_frames": int(round(161 * loss[i])), "source_fps": None,
                "digest": f"{i:064x}", "metadata": video_rows.metadata_values(metadata[i]),
                "fields": {"experiment": experiment, "camera": video_id.split("/")[1],
                           "fuel": ("pine", "oak", "grass")[i % 3],
                           "operator": f"crew {i % 12}"}}, sort_keys=True) + "\n")
    spec = data_format.DatasetSpec(
        window=data_format.Window(LENGTH, 8, "pad"), features=tuple(features),
        compression="none", run_id=RUN_ID, files=tuple(sorted(names + [videos_file])),
        sidecars={"videos": videos_file}, splits={"train": data_format.SplitInfo(
            videos, windows, 0, tuple(entries), 0, 161 * videos)})
    with open(os.path.join(out, data_format.DATASET_JSON), "w") as f:
        f.write(spec.to_json())
    tables = sum(os.path.getsize(os.path.join(out, data_format.table_name(e.file)))
                 for e in entries)
    return {"windows": windows, "videos": videos, "shards": shards, "record_bytes": record,
            "table_bytes": tables,
            "videos_file_bytes": os.path.getsize(os.path.join(out, videos_file)),
            "dataset_json_bytes": os.path.getsize(os.path.join(out, data_format.DATASET_JSON))}


def measure_open(out: str, repeats: int) -> dict:
    videos = os.path.join(out, data_format.sidecar_name("videos", RUN_ID))
    results = {}
    for name, code in SELECTIONS.items():
        runs = []
        for _ in range(repeats):
            done = subprocess.run([sys.executable, "-c", _CHILD.format(
                repo=REPO, out=out, code=code, videos=videos)], capture_output=True, text=True)
            if done.returncode:
                raise RuntimeError(done.stderr[-2000:])
            runs.append(json.loads(done.stdout.strip().splitlines()[-1]))
        results[name] = {"windows": runs[0]["windows"],
                         "median_seconds": statistics.median(r["seconds"] for r in runs),
                         "max_added_mb": max(r["added_mb"] for r in runs),
                         "max_traced_mb": max(r["traced_peak_mb"] for r in runs),
                         "read_mb": runs[0]["read_mb"],
                         "shards_opened": max(r["shards_opened"] for r in runs),
                         "indexes_read": max(r["indexes_read"] for r in runs), "runs": runs}
        r = results[name]
        share = 100 * r["windows"] / runs[0]["split"]
        print(f"  open {name:44s} {r['windows']:9,d} windows ({share:4.1f}%) "
              f"{r['median_seconds']:6.3f} s "
              f"+{r['max_added_mb']:6.1f} MB (traced {r['max_traced_mb']:5.1f} MB)  read "
              f"{r['read_mb']:5.1f} MB  shards opened "
              f"{r['shards_opened']}, indexes read {r['indexes_read']}", flush=True)
    return results


def measure_read(work_dir: str, videos: int, repeats: int) -> dict:
    import bench_reader

    from readers.numpy import EpochBatches, Select, WindowSource, batches

    _, out = bench_reader.make_data(work_dir, videos, files=8)
    with open(os.path.join(out, data_format.load_spec(out).sidecars["videos"])) as f:
        ids = [json.loads(line)["video_id"] for line in f]
    # name -> (selection, hosts): a selection's epoch, or one host's slice of the whole
    # split's (num_shards=hosts): an epoch as short, and no selection
    readings = {"whole split": (None, 1),
                "10% of the videos": (Select(videos=ids[::10]), 1),
                "a tenth of the split (num_shards=10)": (None, 10),
                "50% of the videos": (Select(videos=ids[::2]), 1),
                "half of the split (num_shards=2)": (None, 2)}
    opened = {name: WindowSource(out, "train", select=select)
              for name, (select, _) in readings.items()}
    epochs = iter(range(10**6))

    def called(select, hosts):   # what a loop calls each epoch: the open included
        return batches(out, "train", bench_reader.BATCH, epoch=next(epochs), select=select,
                       num_shards=hosts)

    def planned(source, hosts):  # a source opened once, its epoch's batches read in turn
        plan = EpochBatches(source, bench_reader.BATCH, epoch=next(epochs), num_shards=hosts)
        return (source.read_batch(indices) for indices in plan)

    contenders = {**{f"batches(), {name}": functools.partial(called, *reading)
                     for name, reading in readings.items()},
                  **{f"opened once, {name}": functools.partial(planned, opened[name],
                                                               readings[name][1])
                     for name in readings}}
    for make in contenders.values():
        bench_reader.time_epoch(make())
    runs = {name: [] for name in contenders}
    order, rng = list(contenders), random.Random(0)
    for r in range(repeats):
        rng.shuffle(order)
        for name in order:
            start = time.perf_counter()
            run = bench_reader.time_epoch(contenders[name]())
            run["windows_per_s"] = run["windows"] / (time.perf_counter() - start)
            runs[name].append(run)
            print(f"  round {r + 1} {name:50s} {run['windows']:6d} windows "
                  f"{run['windows_per_s']:8.0f} windows/s", flush=True)
    medians = {name: statistics.median(r["windows_per_s"] for r in rs)
               for name, rs in runs.items()}
    compared = {}    # (selected, against) -> (ratio of medians, median of per-round ratios)
    for way in ("batches()", "opened once"):
        for mine, other in (("10% of the videos", "whole split"),
                            ("50% of the videos", "whole split"),
                            ("10% of the videos", "a tenth of the split (num_shards=10)"),
                            ("50% of the videos", "half of the split (num_shards=2)")):
            a, b = f"{way}, {mine}", f"{way}, {other}"
            compared[f"{a} / {other}"] = (
                medians[a] / medians[b],
                statistics.median(x["windows_per_s"] / y["windows_per_s"]
                                  for x, y in zip(runs[a], runs[b], strict=True)))
    print("medians, windows/s: " + ", ".join(f"{n} {m:,.0f}" for n, m in medians.items()))
    for name, (ratio, paired) in compared.items():
        print(f"  {name}: {ratio:.2f}x (median of per-round ratios {paired:.2f}x)")
    return {"videos": videos, "windows": {n: rs[0]["windows"] for n, rs in runs.items()},
            "median_windows_per_s": medians, "ratios": compared, "runs": runs}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--windows", type=int, default=1_000_000)
    parser.add_argument("--videos", type=int, default=50_000)
    parser.add_argument("--shards", type=int, default=400)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--read_videos", type=int, default=2048)
    parser.add_argument("--read_repeats", type=int, default=9)
    parser.add_argument("--parts", default="open,read",
                        help="which to measure: open, read or both (default: %(default)s)")
    parser.add_argument("--json", required=True)
    parser.add_argument("--work_dir", default=None)
    args = parser.parse_args()
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    with tempfile.TemporaryDirectory() as temp:
        work = args.work_dir or temp
        out = os.path.join(work, "index")
        start = time.perf_counter()
        made = make_index(out, args.windows, args.videos, args.shards)
        print(f"made the index of {made['windows']:,} windows in "
              f"{time.perf_counter() - start:.0f} s: tables {made['table_bytes'] / 2**20:.1f} MB, "
              f"videos file {made['videos_file_bytes'] / 2**20:.1f} MB, dataset.json "
              f"{made['dataset_json_bytes'] / 2**10:.0f} KB", flush=True)
        parts = args.parts.split(",")
        opened = measure_open(out, args.repeats) if "open" in parts else None
        read = (measure_read(os.path.join(work, "read"), args.read_videos, args.read_repeats)
                if "read" in parts else None)
    with open(args.json, "w") as f:
        json.dump({"config": vars(args), "targets": TARGETS, "index": made, "open": opened,
                   "read": read, "cpus": os.cpu_count()}, f, indent=2)
    print(f"wrote {args.json}")


if __name__ == "__main__":
    main()
