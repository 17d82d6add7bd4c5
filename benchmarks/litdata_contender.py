# LitData lives in a virtual environment of its own: the project does not depend on it, and
# `pip install litdata` would replace a CPU torch with the CUDA build (15 nvidia packages)
# and pull torchvision, which litdata imports only for images and video. Made with:
#
#   python3.11 -m venv /tmp/litdata-venv
#   /tmp/litdata-venv/bin/pip install torch==2.13.0          # the CPU wheel (2.13.0+cpu)
#   /tmp/litdata-venv/bin/pip install --no-deps litdata==0.2.76
#   /tmp/litdata-venv/bin/pip install lightning-utilities filelock numpy boto3 requests \
#       "urllib3>=1.26" tifffile obstore google-crc32c fsspec Pillow psutil
#
# which gave: litdata 0.2.76, torch 2.13.0+cpu, numpy 2.4.6, lightning-utilities 0.15.3,
# obstore 0.12.1, boto3 1.44.18, tifffile 2026.3.3, google-crc32c 1.9.0, fsspec 2026.9.0,
# pillow 13.0.0, psutil 7.2.2 (Python 3.11). The first four lines of litdata's own
# requirements, less torch and torchvision; the last four for the project's
# `readers.numpy` (no Beam, no TensorFlow) and for measuring. `pip check` then reports only
# the missing torchvision.
"""LitData's StreamingDataset and StreamingDataLoader over our windows: one contender of
benchmarks/bench_dataloader.py, run in the LitData venv (see the comment above):

    PYTHONPATH=. /tmp/litdata-venv/bin/python benchmarks/litdata_contender.py \\
        --data out/ --cache /tmp/litdata-cache --epochs 3 --workers 2 --batch 64 \\
        --json litdata.json

--data is one of our finished datasets of latent windows; its "train" split is read with
`readers.numpy.WindowSource(...).read_batch` and written once with `litdata.optimize`
into --cache (64 MB chunks, one item per window: a dict of `window` float32 [L, D],
`mask` float32 [L], `start` int64 [1] and `metadata` float32 [M]), in the source's order
(which the job has already shuffled globally). A --cache that already holds LitData's
index.json is used as it is, after checking that it holds as many windows.

Then --epochs shuffled epochs, each with a new StreamingDataset(shuffle=True,
batch_decode=False) and StreamingDataLoader(batch_size, num_workers); the loader's epoch
counter is set so that epoch e is LitData's epoch e (its own shuffle of that epoch), as
one loader reused across epochs would give. Each batch is consumed with
`float(batch["window"].sum())`, the work every contender does.

`batch_decode=False` is LitData's fastest honest configuration for this data. The
setting (StreamingDataset(batch_decode=...), litdata 0.2.76) is how many items the item
loader deserializes together once a chunk is local: False (the same as 0, "item") decodes
only the item asked for: one slice of the memory-mapped chunk, one copy of each array out
of it. The default, "auto", picks a window from the data format and the mean item size:
208 rows for our 80 KB windows. Under shuffle=True LitData orders the items of a chunk in
shuffled blocks of 256 (item_shuffle_window), which do not line up with 208-row windows,
so the items asked for keep jumping between two windows and each jump decodes a whole
window again. In one process, on 1,541 windows: "auto" 736 windows/s, 256 (windows
aligned with the blocks) 34,000, False 50,000. False gives the same items in the same
order with no decode thrown away. Nothing else is changed from LitData's defaults:
chunk order permuted per epoch, items shuffled within each 64 MB chunk (about 800
windows) in 256-item blocks, default collate, prefetch_factor 2, the DataLoader's
default start method (fork here: "start_method" in the output), chunks memory-mapped in
place from a local directory (its "POSIX-fast" mode: no cache copy). A full in-chunk
permutation (item_shuffle_window=0) reads as fast, but is not LitData's default. Under
POSIX-fast LitData lowers num_workers when MemAvailable is short (256 MB a worker): the
"workers" figure is what it used.

Per epoch: windows, wall_s (from creating the dataset and loader to the last batch),
first_batch_s, steady_windows_per_s (windows after the first batch over the time after
it), windows_per_s; cpu_main_s (this process, the sampling thread included, creation to
last batch) and cpu_workers_s (the workers, whole lives, from the CPU of reaped children
once the loader's workers are joined; the /proc figures sampled every 0.1 s are kept as
cpu_workers_sampled_s), and peak_pss_mb: the highest sum of PSS over this process and its
live children, sampled every 0.1 s in a thread (PSS counts the mapped chunk pages they
touch, shared among them); other_cpu_s, the CPU the rest of the machine used meanwhile
(noise: the machine is shared), and the 1-minute load average after the epoch.
Output: {"contender": "litdata-2", "epochs": [...], "versions": {...}} to --json, and one
line per epoch to stdout.
"""
from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import platform
import resource
import subprocess
import sys
import threading
import time

os.environ.setdefault("LITDATA_DISABLE_VERSION_CHECK", "1")  # off by default in 0.2.76: keep it so

try:
    import litdata
    from litdata import StreamingDataLoader, StreamingDataset
except ImportError as error:
    sys.exit(f"litdata_contender: litdata is not importable here ({error}); run it with the "
             "LitData venv's python (see the install commands at the top of "
             "benchmarks/litdata_contender.py)")

import numpy as np
import torch

try:
    import psutil
except ImportError:  # /proc then
    psutil = None  # type: ignore[assignment]

sys.path.append(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # after PYTHONPATH
from readers.numpy import WindowSource  # noqa: E402

MB = 2**20
SAMPLE_EVERY_S = 0.1
CHUNK_BYTES = "64MB"
ITEMS_PER_READ = 64
_SOURCE: dict[str, WindowSource] = {}


def _windows(span: tuple[str, int, int]):
    """optimize's fn: the windows [begin, end) of --data's train split, one item each."""
    data, begin, end = span
    if data not in _SOURCE:
        _SOURCE[data] = WindowSource(data, "train")
    batch = _SOURCE[data].read_batch(slice(begin, end))
    for i in range(end - begin):
        yield {"window": np.ascontiguousarray(batch["window"][i], dtype=np.float32),
               "mask": np.ascontiguousarray(batch["mask"][i], dtype=np.float32),
               "start": np.asarray([batch["start"][i]], dtype=np.int64),
               "metadata": np.ascontiguousarray(batch["metadata"][i], dtype=np.float32)}


def _cached_items(cache: str) -> int | None:
    index = os.path.join(cache, "index.json")
    if not os.path.exists(index):
        return None
    with open(index) as f:
        return sum(chunk["chunk_size"] for chunk in json.load(f)["chunks"])


def build_cache(data: str, cache: str) -> dict:
    """LitData's copy of --data's train split in --cache, made unless it is there."""
    total = len(WindowSource(data, "train"))
    have = _cached_items(cache)
    if have is not None:
        if have != total:
            sys.exit(f"litdata_contender: {cache} holds {have} windows, {data} has {total}; "
                     "give another --cache or remove it")
        return {"made": False, "windows": total}
    spans = [(data, b, min(b + ITEMS_PER_READ, total)) for b in range(0, total, ITEMS_PER_READ)]
    start = time.perf_counter()
    litdata.optimize(fn=_windows, inputs=spans, output_dir=cache, chunk_bytes=CHUNK_BYTES,
                     num_workers=1, reorder_files=False, verbose=False)
    made_s = time.perf_counter() - start
    if _cached_items(cache) != total:
        sys.exit(f"litdata_contender: optimize wrote {_cached_items(cache)} windows of {total}")
    return {"made": True, "windows": total, "optimize_s": round(made_s, 2)}


def _children(pid: int) -> list[int]:
    if psutil is not None:
        try:
            return [p.pid for p in psutil.Process(pid).children(recursive=True)]
        except psutil.Error:
            return []
    parents: dict[int, list[int]] = {}
    for name in os.listdir("/proc"):
        if name.isdigit():
            try:
                with open(f"/proc/{name}/stat") as f:
                    ppid = int(f.read().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
            parents.setdefault(ppid, []).append(int(name))
    out, todo = [], [pid]
    while todo:
        kids = parents.get(todo.pop(), [])
        out += kids
        todo += kids
    return out


def _pss_bytes(pid: int) -> int:
    try:
        with open(f"/proc/{pid}/smaps_rollup") as f:
            for line in f:
                if line.startswith("Pss:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0


def _cpu_s(pid: int) -> float | None:
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    except (OSError, IndexError, ValueError):
        return None


class Sampler(threading.Thread):
    """Every 0.1 s: the sum of PSS over this process and its children (peak kept), and
    each child's CPU seconds (the last value seen per pid)."""

    def __init__(self) -> None:
        super().__init__(daemon=True)
        self.stop_event = threading.Event()
        self.peak_pss = 0
        self.child_cpu: dict[int, float] = {}
        self.max_children = 0

    def run(self) -> None:
        me = os.getpid()
        while not self.stop_event.is_set():
            kids = _children(me)
            self.max_children = max(self.max_children, len(kids))
            self.peak_pss = max(self.peak_pss, sum(_pss_bytes(p) for p in [me] + kids))
            for pid in kids:
                cpu = _cpu_s(pid)
                if cpu is not None:
                    self.child_cpu[pid] = cpu
            self.stop_event.wait(SAMPLE_EVERY_S)

    def stop(self) -> None:
        self.stop_event.set()
        self.join()


def _machine_busy_s() -> float:
    """CPU seconds the whole machine has spent busy (all cores, /proc/stat)."""
    with open("/proc/stat") as f:
        ticks = [int(x) for x in f.readline().split()[1:]]
    busy = sum(ticks[:8]) - ticks[3] - ticks[4]  # less idle and iowait; guest is in user
    return busy / os.sysconf("SC_CLK_TCK")


def _rusage_s(who: int) -> float:
    usage = resource.getrusage(who)
    return usage.ru_utime + usage.ru_stime


def run_epoch(cache: str, epoch: int, workers: int, batch_size: int) -> dict:
    sampler = Sampler()
    sampler.start()
    children_before = _rusage_s(resource.RUSAGE_CHILDREN)
    main_before = _rusage_s(resource.RUSAGE_SELF)
    machine_before = _machine_busy_s()
    start = time.perf_counter()
    dataset = StreamingDataset(input_dir=cache, shuffle=True, batch_decode=False)
    loader = StreamingDataLoader(dataset, batch_size=batch_size, num_workers=workers)
    loader.current_epoch = epoch - 1  # its __iter__ adds one: LitData's epoch `epoch`
    windows = batches = 0
    first = total = 0.0
    first_windows = 0
    for batch in loader:
        total += float(batch["window"].sum())
        windows += int(batch["window"].shape[0])
        batches += 1
        if batches == 1:
            first = time.perf_counter() - start
            first_windows = windows
    wall = time.perf_counter() - start
    main_cpu = _rusage_s(resource.RUSAGE_SELF) - main_before
    used_workers = loader.num_workers
    del loader, dataset  # the epoch's iterator has ended: its workers are joined
    children_cpu = _rusage_s(resource.RUSAGE_CHILDREN) - children_before
    other_cpu = (_machine_busy_s() - machine_before - children_cpu
                 - (_rusage_s(resource.RUSAGE_SELF) - main_before))
    sampler.stop()
    steady = (windows - first_windows) / (wall - first) if wall > first else 0.0
    return {"epoch": epoch, "windows": windows, "batches": batches,
            "wall_s": round(wall, 4), "first_batch_s": round(first, 4),
            "windows_per_s": round(windows / wall, 1),
            "steady_windows_per_s": round(steady, 1),
            "cpu_main_s": round(main_cpu, 3), "cpu_workers_s": round(children_cpu, 3),
            "cpu_workers_sampled_s": round(sum(sampler.child_cpu.values()), 3),
            "cpu_s_per_1k_windows": round(1000 * (main_cpu + children_cpu) / windows, 4),
            "peak_pss_mb": round(sampler.peak_pss / MB, 1),
            "other_cpu_s": round(max(other_cpu, 0.0), 3), "loadavg_1m": os.getloadavg()[0],
            "children_seen": sampler.max_children, "workers": used_workers,
            "checksum": total}


def versions() -> dict:
    out = {"python": platform.python_version(), "litdata": litdata.__version__,
           "torch": torch.__version__, "numpy": np.__version__,
           "psutil": psutil.__version__ if psutil is not None else None}
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data", required=True, help="one of our finished datasets")
    parser.add_argument("--cache", required=True, help="where LitData's optimized copy goes")
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--json", help="write the result here")
    parser.add_argument("--cache-only", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()

    data, cache_dir = os.path.abspath(args.data), os.path.abspath(args.cache)
    if args.cache_only:
        print(json.dumps(build_cache(data, cache_dir)))
        return
    # optimize runs in a process of its own: it calls multiprocessing.set_start_method(
    # "spawn", force=True), and a DataLoader made afterwards in its process spawns its
    # workers (each imports torch and litdata again, every epoch): 2 s to the first batch
    # and 3.1 s of worker CPU for 1,541 windows here, against 0.05 s and 0.24 s when forked.
    made = subprocess.run([sys.executable, os.path.abspath(__file__), "--data", data,
                           "--cache", cache_dir, "--cache-only"],
                          check=True, stdout=subprocess.PIPE, text=True)
    cache = json.loads(made.stdout.strip().splitlines()[-1])
    epochs = []
    for epoch in range(1, args.epochs + 1):
        result = run_epoch(cache_dir, epoch, args.workers, args.batch)
        epochs.append(result)
        print(f"litdata-{args.workers} epoch {epoch}: {result['windows']} windows in "
              f"{result['wall_s']:.2f} s ({result['windows_per_s']:,.0f}/s; first batch "
              f"{result['first_batch_s']:.3f} s, then {result['steady_windows_per_s']:,.0f}/s), "
              f"CPU main {result['cpu_main_s']:.2f} s + workers {result['cpu_workers_s']:.2f} s, "
              f"peak PSS {result['peak_pss_mb']:.0f} MB", flush=True)
    out = {"contender": f"litdata-{args.workers}", "batch_size": args.batch,
           "start_method": multiprocessing.get_start_method(),
           "cache": cache, "epochs": epochs, "versions": versions()}
    if args.json:
        with open(args.json, "w") as f:
            json.dump(out, f, indent=1)


if __name__ == "__main__":
    main()
