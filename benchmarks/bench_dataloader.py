"""readers.numpy through PyTorch's DataLoader, against `batches()` in one process and the
loaders a user would pick otherwise: windows/s, CPU seconds a window, memory.

    python benchmarks/bench_dataloader.py --json bench_dataloader.json [--videos 400] \\
        [--rounds 5] [--epochs 2] [--contenders batches,loader-1,loader-2,...] \\
        [--before REV] [--litdata_python /tmp/litdata-venv/bin/python] [--work_dir DIR]
    python benchmarks/bench_dataloader.py --profile --json profile.json [--work_dir DIR]

Writes a latent sample of --videos videos (beam_jobs.sample: 400 give 6,144 windows of
100 x 200 float32 at batch 64, about 500 MB) and cuts it with the job (window 100, stride
50, 16 shards), then times whole epochs (batch 64, shuffled, the last partial batch
dropped) of each contender, each round in a new order, each contender's --epochs epochs
in a process of its own (a fresh one each round, as a trainer starts):

  batches        readers.numpy.batches(out, "train", 64, seed=0, epoch=e): one process
  loader-N       a DataLoader over EpochBatches(...).source, the plan as its sampler,
                 batch_size=None, N worker processes (readers.numpy.workers.forkserver() as
                 its context, end_with_parent as worker_init_fn), as the examples have
                 it: each epoch a DataLoader of its own
  loader-2@REV   loader-2 with the readers package of commit REV (--before), as that
                 commit's docs showed it (PyTorch's default context, fork)
  mixture-2      a DataLoader of 2 workers over MixtureBatches of a Mixture of the
                 dataset twice (weights 0.5 and 0.5)
  grain-2        Grain's DataLoader of 2 workers over the WindowSource (IndexSampler,
                 grain.Batch(64)): a window an item, batched in the workers
  grain-batches-2  Grain's DataLoader of 2 workers over an EpochBatches plan's batches, a
                 batch an item read whole (readers.numpy.BatchSource), as docs/readers.md
                 shows it
  litdata-2      LitData's StreamingDataLoader of 2 workers over a copy of the windows
                 made by litdata.optimize (benchmarks/litdata_contender.py, run by
                 --litdata_python, a venv of its own: docs/benchmarks.md)

Each batch is touched whole by the loop (`float(window.sum())`, numpy's, a tensor's too:
torch's would start threads of its own), as a copy to a GPU would read it: a page the
trainer has not mapped costs a fault there. Per epoch: windows/s
from the loader's start to its last batch (a DataLoader's workers start each epoch),
the steady rate after the first batch, the CPU seconds of the process and its children
(workers, a forkserver) a window, and the peak of their memory (the sum of their PSS,
sampled every 0.1 s). Medians over the rounds of each contender's epochs after its
first (which starts a forkserver and warms the page cache).

--profile times where a batch's time goes, one step at a time, in one process and
between two (docs/benchmarks.md): reading a batch into this process's memory, into a
new shared segment and into a reused one; the copy PyTorch makes of each tensor into
shared memory; pickling a batch; in the receiving process, unpickling each way (one
descriptor per tensor, or one a batch), and touching the batch; and what starting and
ending a DataLoader's two workers costs each epoch, by multiprocessing context.
"""
from __future__ import annotations

import argparse
import functools
import importlib
import json
import os
import random
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from typing import Any, Callable, Iterable, Optional

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
HERE = os.path.dirname(os.path.abspath(__file__))
BATCH = 64
CONTENDERS = ("batches", "loader-1", "loader-2", "mixture-2", "grain-2", "grain-batches-2",
              "litdata-2")


def make_data(work_dir: str, videos: int) -> str:
    """The sample's shards (made once in `work_dir`); their directory."""
    out = os.path.join(work_dir, "out")
    if not os.path.exists(os.path.join(out, "dataset.json")):
        from beam_jobs import make_shards
        from beam_jobs.sample import write_latent_sample

        write_latent_sample(os.path.join(work_dir, "latents"), videos=videos, files=8)
        make_shards.run(["--input", os.path.join(work_dir, "latents", "*.tfrecord"),
                         "--output_dir", out, "--window", "100", "--stride", "50",
                         "--num_shards", "16", "--overwrite"])
    return out


# --- one contender's epochs, in a process of its own (--run) ---------------------------

class _Meter:
    """The CPU seconds and the peak PSS of this process and its descendants while it
    runs (sampled every 0.1 s). CPU counts each process alive with what its ended
    children used (a forkserver's reaped workers), so that a worker that has ended is
    counted in its parent."""

    def __init__(self):
        import psutil
        self._psutil, self._me = psutil, psutil.Process()
        self.peak_pss, self._stop = 0, threading.Event()
        self._cpu_before = self._cpu()
        self._thread = threading.Thread(target=self._sample, daemon=True)
        self._thread.start()

    def _family(self) -> list:
        return [self._me, *self._me.children(recursive=True)]

    def _cpu(self) -> float:
        seconds = 0.0
        for process in self._family():
            try:
                times = process.cpu_times()
            except self._psutil.Error:    # gone meanwhile: in its parent's
                continue
            seconds += times.user + times.system + times.children_user + times.children_system
        return seconds

    def _sample(self) -> None:
        while not self._stop.wait(0.1):
            total = 0
            for process in self._family():
                try:
                    total += process.memory_full_info().pss
                except self._psutil.Error:
                    pass
            self.peak_pss = max(self.peak_pss, total)

    def cpu_seconds(self) -> float:
        """CPU seconds since the meter started."""
        return self._cpu() - self._cpu_before

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()


def time_epoch(make: Callable[[], Iterable[dict]]) -> dict:
    """One epoch of the loader `make` starts, each batch touched whole."""
    meter = _Meter()
    started = time.perf_counter()
    first, windows = None, 0
    loader = make()
    iterator = iter(loader)
    for batch in iterator:
        if first is None:
            first = time.perf_counter()
            at_first = windows + len(batch["start"])
        window = batch["window"]      # numpy's sum for all: torch's would start threads
        float((window.numpy() if hasattr(window, "numpy") else window).sum())
        windows += len(batch["start"])
    ended = time.perf_counter()
    del iterator, loader
    time.sleep(0.3)           # the workers reaped, their CPU their parent's
    cpu = meter.cpu_seconds()
    meter.stop()
    return {"windows": windows, "seconds": ended - started,
            "to_first_batch": (first or ended) - started,
            "windows_per_second": windows / (ended - started),
            "steady_windows_per_second": (windows - at_first) / (ended - first)
            if first and ended > first else None,
            "cpu_seconds_per_window": cpu / windows, "peak_pss_mb": meter.peak_pss / 2**20}


def _worker_helpers() -> Any:
    """The readers' DataLoader helpers on the path: readers/numpy/workers.py, or
    readers/workers.py in a commit from before the readers' folders (464776e); None in
    one from before either."""
    for name in ("readers.numpy.workers", "readers.workers"):
        try:
            return importlib.import_module(name)
        except ModuleNotFoundError as e:   # readers.numpy a module, or no such file
            if e.name != name:   # a module it imports is missing: not an older tree
                raise
    return None


def loaders(name: str, data: str) -> Callable[[int], Iterable[dict]]:
    """Contender `name`'s loader of an epoch."""
    import readers.numpy as rn

    if name == "batches":
        return lambda epoch: rn.batches(data, "train", BATCH, seed=0, epoch=epoch)
    import torch

    workers = int(name.split("@")[0].rsplit("-", 1)[1])
    # a commit's readers from before these (loader-2@REV): its docs' DataLoader
    helpers = _worker_helpers()
    end_with_parent = getattr(helpers, "end_with_parent", None)
    context = helpers.forkserver() if hasattr(helpers, "forkserver") else None  # else fork

    def data_loader(dataset, sampler):
        return torch.utils.data.DataLoader(dataset, sampler=sampler, batch_size=None,
                                           num_workers=workers, multiprocessing_context=context,
                                           worker_init_fn=end_with_parent)

    if name.startswith("loader-"):
        source = rn.WindowSource(data, "train")

        def loader(epoch):
            plan = rn.EpochBatches(source, BATCH, seed=0, epoch=epoch)
            return data_loader(plan.source, plan)
        return loader
    if name.startswith("mixture-"):
        mixture = rn.Mixture([(rn.WindowSource(data, "train"), 0.5),
                              (rn.WindowSource(data, "train"), 0.5)], seed=0)

        def mixed(epoch):
            plan = rn.MixtureBatches(mixture, BATCH, epoch=epoch)
            return data_loader(plan.source, plan)
        return mixed
    if name.startswith("grain-batches-"):
        import grain.python as grain
        source = rn.WindowSource(data, "train")

        def grain_batches(epoch):
            plan = rn.EpochBatches(source, BATCH, seed=0, epoch=epoch)
            return grain.DataLoader(data_source=rn.BatchSource(plan), worker_count=workers,
                                    sampler=grain.SequentialSampler(len(plan),
                                                                    grain.NoSharding()))
        return grain_batches
    if name.startswith("grain-"):
        import grain.python as grain
        source = rn.WindowSource(data, "train")
        return lambda epoch: grain.DataLoader(
            data_source=source.for_epoch(epoch),
            sampler=grain.IndexSampler(len(source), grain.NoSharding(), shuffle=True,
                                       seed=epoch, num_epochs=1),
            operations=[grain.Batch(BATCH, drop_remainder=True)], worker_count=workers)
    raise SystemExit(f"no contender {name!r}")


def run_contender(name: str, data: str, epochs: int) -> list[dict]:
    """`epochs` epochs of contender `name`, in this process."""
    make = loaders(name, data)
    return [time_epoch(functools.partial(make, epoch)) for epoch in range(epochs)]


# --- the benchmark: contenders in turn ------------------------------------------------

def readers_at(rev: str, work_dir: str) -> str:
    """A directory holding commit `rev`'s readers package (for PYTHONPATH)."""
    target = os.path.join(work_dir, f"readers-{rev}")
    if not os.path.exists(target):
        os.makedirs(target)
        archive = subprocess.run(["git", "-C", REPO, "archive", rev, "readers"],
                                 check=True, capture_output=True).stdout
        subprocess.run(["tar", "-x", "-C", target], input=archive, check=True)
    return target


def one_round(name: str, data: str, epochs: int, work_dir: str, before: Optional[str],
              litdata_python: Optional[str]) -> list[dict]:
    """Contender `name`'s epochs in a new process; their figures."""
    out = os.path.join(work_dir, f"{name}.json")
    env = dict(os.environ, PYTHONPATH=REPO)
    if name == "litdata-2":
        command = [litdata_python, os.path.join(HERE, "litdata_contender.py"), "--data", data,
                   "--cache", os.path.join(work_dir, "litdata"), "--epochs", str(epochs),
                   "--workers", "2", "--batch", str(BATCH), "--json", out]
    else:
        if "@" in name:
            env["PYTHONPATH"] = f"{readers_at(before or '', work_dir)}:{REPO}"
        command = [sys.executable, __file__, "--run", name, "--data", data,
                   "--epochs", str(epochs), "--json", out]
    subprocess.run(command, env=env, check=True, cwd=work_dir)
    with open(out) as f:
        epochs = json.load(f)["epochs"]
    return [_as_ours(e) for e in epochs] if name == "litdata-2" else epochs


def _as_ours(epoch: dict) -> dict:
    """An epoch of litdata_contender.py's, in this script's figures."""
    return {"windows": epoch["windows"], "seconds": epoch["wall_s"],
            "to_first_batch": epoch["first_batch_s"],
            "windows_per_second": epoch["windows_per_s"],
            "steady_windows_per_second": epoch["steady_windows_per_s"],
            "cpu_seconds_per_window": (epoch["cpu_main_s"] + epoch["cpu_workers_s"])
            / epoch["windows"], "peak_pss_mb": epoch["peak_pss_mb"]}


def summary(epochs: list[dict]) -> dict:
    """Medians of each figure over epochs."""
    keys = [key for key in epochs[0] if isinstance(epochs[0][key], (int, float))]
    return {key: statistics.median(e[key] for e in epochs if e[key] is not None)
            for key in keys}


def benchmark(args: argparse.Namespace, work_dir: str) -> dict:
    data = make_data(work_dir, args.videos)
    names = args.contenders.split(",")
    if args.before:
        names.append(f"loader-2@{args.before}")
    if not args.litdata_python:
        names = [n for n in names if n != "litdata-2"]
    rng = random.Random(0)
    epochs: dict[str, list[dict]] = {name: [] for name in names}
    for round_number in range(args.rounds):
        order = rng.sample(names, len(names))
        for name in order:
            ran = one_round(name, data, args.epochs, work_dir, args.before, args.litdata_python)
            epochs[name] += ran[1:]       # the first epoch of a process starts it
            s = summary(ran[1:])
            print(f"round {round_number + 1} {name:16s} {s['windows_per_second']:9,.0f} w/s "
                  f"(steady {s['steady_windows_per_second']:9,.0f}) "
                  f"{s['cpu_seconds_per_window'] * 1e6:7.1f} us CPU a window "
                  f"{s['peak_pss_mb']:7.0f} MB", flush=True)
    results = {name: summary(runs) for name, runs in epochs.items()}
    base = results.get("batches", {}).get("windows_per_second")
    for name, figures in results.items():
        ratio = f" {figures['windows_per_second'] / base:.2f}x batches()" if base else ""
        print(f"{name:16s} {figures['windows_per_second']:9,.0f} w/s (steady "
              f"{figures['steady_windows_per_second']:9,.0f}){ratio}, "
              f"{figures['cpu_seconds_per_window'] * 1e6:.1f} us CPU a window, "
              f"{figures['peak_pss_mb']:.0f} MB")
    return {"config": vars(args), "medians": results, "epochs": epochs}


# --- --profile: where a batch's time goes ---------------------------------------------

def profile(work_dir: str, videos: int, batches: int = 80) -> dict:
    """Each step's median milliseconds a batch (the module's docstring)."""
    from multiprocessing.reduction import ForkingPickler

    import numpy as np
    import torch
    import torch.multiprocessing  # noqa: F401 (PyTorch's reductions for pickling tensors)

    from readers.numpy import EpochBatches, WindowSource, handover, scatter

    source = WindowSource(make_data(work_dir, videos), "train")
    plan = EpochBatches(source, BATCH, seed=0)
    steps = [source.in_split(np.asarray(plan.batch(k))) for k in range(min(batches, plan.steps))]

    def read(windows, allocate):
        return source.read_split_windows(windows, allocate=allocate)

    class Reused:
        """An arena whose one segment is filled again and again."""
        def __init__(self):
            self.memory = None

        def __call__(self, nbytes):
            if self.memory is None:
                self.memory = handover.Arena().allocate(nbytes)
            return self.memory

    reused = Reused()
    times: dict[str, list[float]] = {}

    def timed(key, fn, *args):
        started = time.perf_counter()
        value = fn(*args)
        times.setdefault(key, []).append(time.perf_counter() - started)
        return value

    def as_tensors(batch):
        return {k: torch.as_tensor(v) for k, v in batch.items() if v.dtype.kind != "S"}

    def shared(tensors):
        return [t.share_memory_() for t in tensors.values()]

    for windows in steps:
        batch = timed("worker: read into its own memory", read, windows,
                      scatter.private_memory)
        tensors = timed("worker: numpy -> torch (as_tensor)", as_tensors, batch)
        timed("worker: each tensor copied into a new shared segment (PyTorch)", shared,
              tensors)
        timed("worker: pickled, a descriptor per tensor", ForkingPickler.dumps, tensors)
        timed("worker: read into a new shared segment", read, windows,
              handover.Arena().allocate)
        timed("worker: read into a reused shared segment", read, windows, reused)
        arena = handover.Arena()
        handed = arena.handed(read(windows, arena.allocate))
        timed("worker: pickled, one descriptor a batch", ForkingPickler.dumps, handed)
    medians = {key: statistics.median(values) * 1e3 for key, values in times.items()}
    medians.update(_trainer_side(work_dir, videos, min(batches, plan.steps)))
    for context in STARTS:
        done = subprocess.run([sys.executable, __file__, "--run", f"start-{context}",
                               "--data", source.path, "--json", "-"], check=True,
                              capture_output=True, text=True, cwd=work_dir)
        medians[f"a DataLoader's 2 workers started and ended, {STARTS[context]}"] = \
            json.loads(done.stdout.strip().splitlines()[-1]) * 1e3
    for key, ms in medians.items():
        print(f"{ms:8.3f} ms  {key}")
    return medians


STARTS = {"fork": "fork (PyTorch's default)", "forkserver": "a bare forkserver",
          "ours": "readers.numpy.workers.forkserver(): one that imported torch and the reader"}


def start_cost(context: str, data: str, epochs: int = 4) -> float:
    """The median CPU seconds (the process and its descendants) of a DataLoader of two
    workers that reads 2 batches, by context (STARTS), after the first (which starts a
    forkserver)."""
    import torch

    import readers.numpy as rn
    from readers.numpy.workers import forkserver

    made = {"fork": lambda: "fork", "forkserver": lambda: "forkserver", "ours": forkserver}
    source = rn.WindowSource(data, "train")
    costs = []
    for epoch in range(epochs):
        plan = rn.EpochBatches(source, BATCH, seed=0, epoch=epoch)
        meter = _Meter()
        loader = torch.utils.data.DataLoader(plan.source, sampler=[plan.batch(0), plan.batch(1)],
                                             batch_size=None, num_workers=2,
                                             multiprocessing_context=made[context]())
        for _ in loader:
            pass
        del loader
        time.sleep(0.3)           # the workers reaped, their CPU their parent's
        costs.append(meter.cpu_seconds())
        meter.stop()
    return statistics.median(costs[1:])


def _produce(mode: str, data: str, steps: int, queue, done) -> None:
    """A worker's side of --profile: `steps` batches into `queue`, each as PyTorch hands
    tensors over (`tensors`) or as readers.numpy.handover does (`handed`)."""
    import numpy as np
    import torch

    from readers.numpy import EpochBatches, WindowSource, handover

    source = WindowSource(data, "train")
    plan = EpochBatches(source, BATCH, seed=0)
    for k in range(steps):
        windows = source.in_split(np.asarray(plan.batch(k)))
        if mode == "tensors":
            batch = source.read_split_windows(windows, allocate=lambda n: np.empty(n, np.uint8))
            queue.put({key: torch.as_tensor(v) for key, v in batch.items()
                       if v.dtype.kind != "S"})
        else:
            arena = handover.Arena()
            queue.put(arena.handed(source.read_split_windows(windows, allocate=arena.allocate)))
    queue.put(None)
    done.wait()


def _trainer_side(work_dir: str, videos: int, steps: int) -> dict[str, float]:
    """The receiving process's CPU milliseconds a batch: unpickling it (taking its
    descriptors, mapping) and touching it whole, each way a worker hands it over."""
    import torch.multiprocessing as mp

    data = make_data(work_dir, videos)
    figures = {}
    for mode in ("tensors", "handed"):
        context = mp.get_context("forkserver")
        queue, done = context.Queue(steps + 1), context.Event()
        worker = context.Process(target=_produce, args=(mode, data, steps, queue, done))
        worker.start()
        time.sleep(0.5)
        unpickle, touch = [], []
        while True:
            started = time.process_time()
            batch = queue.get()
            if batch is None:
                break
            unpickle.append(time.process_time() - started)
            started = time.process_time()
            float(batch["window"].sum())
            touch.append(time.process_time() - started)
            del batch
        done.set()
        worker.join()
        said = "a descriptor per tensor" if mode == "tensors" else "one descriptor a batch"
        figures[f"trainer: a batch taken from the queue, {said}"] = statistics.median(
            unpickle[1:]) * 1e3
        figures[f"trainer: the batch touched whole, {said}"] = statistics.median(touch[1:]) * 1e3
    return figures


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--json", required=True)
    parser.add_argument("--videos", type=int, default=400)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--epochs", type=int, default=2, help="a process's epochs, the "
                        "first of which is not counted")
    parser.add_argument("--contenders", default=",".join(CONTENDERS))
    parser.add_argument("--before", default=None, metavar="REV")
    parser.add_argument("--litdata_python", default=None)
    parser.add_argument("--work_dir", default=None)
    parser.add_argument("--profile", action="store_true")
    parser.add_argument("--run", help=argparse.SUPPRESS)     # one contender, in this process
    parser.add_argument("--data", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.run and args.run.startswith("start-"):
        print(json.dumps(start_cost(args.run.removeprefix("start-"), args.data)))
        return
    if args.run:
        result: Any = {"epochs": run_contender(args.run, args.data, args.epochs)}
    else:
        with tempfile.TemporaryDirectory(dir=args.work_dir) as temp:
            work_dir = args.work_dir or temp
            result = (profile(work_dir, args.videos) if args.profile
                      else benchmark(args, work_dir))
    with open(args.json, "w") as f:
        json.dump(result, f, indent=2)


if __name__ == "__main__":
    main()
