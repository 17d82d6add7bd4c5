"""Reader throughput, side by side: the reader of the latent GPT
user story (serialized-tensor records), ours, a no-parse floor,
and the numpy reader alone and in PyTorch DataLoader workers.

    python benchmarks/bench_reader.py --json bench_reader.json \\
        [--videos 512,128] [--busy 0,1] [--files 8] [--repeats 5] [--work_dir DIR] \\
        [--before REV]

For each --videos count, writes a latent sample (beam_jobs.sample) and cuts it into
shards with beam_jobs.make_shards (window 100, stride 50, 16 shards; 512 videos give
7,872 windows, 128 about 1,970), then for each --busy count (processes kept spinning on
as many cores meanwhile, a trainer's host where the model's input step competes for CPU)
times full epochs (batch 64, drop_remainder) of each contender, counting windows/s:

  baseline  S: the user story's TFRecordReader on the input files: parse the whole video,
            then flat_map over overlapping windows, shuffle(2048), batch, prefetch
  ours      readers.make_dataset(out_dir, "train", batch_size=64)
  floor     F: TFRecordDataset over the shards, batch, prefetch: reading, no parsing
  copy      F+C: F, then each batch's records copied once into a dense uint8 tensor
            (tf.io.decode_raw). Every reader built of TensorFlow's ops gives its windows
            out as dense tensors by at least one such copy more than F makes; F+C is F
            with that copy and nothing else: no parse, no shuffle
  numpy     readers.numpy.batches(out_dir, "train", 64): no TensorFlow, one process
  torch     a torch DataLoader over readers.numpy.WindowSource, 2 worker processes
            (when torch is installed)
  before    with --before REV: `make_dataset` of REV's readers/tfdata/dataset.py, beside
            this tree's other modules (for a change to that file alone), as `ours` is
            made; REV from f3211bf on (the readers' folders, with the names of this
            tree)

Each dataset is built once and iterated once per epoch, as a trainer does (Keras' fit
makes an iterator per epoch); every epoch starts its iterator afresh, so no contender
works ahead while another is timed. Each contender gets one warm-up epoch, then the
contenders take turns for --repeats epochs each, each round in a new order; the table
shows medians. The DataLoader's epochs come after the others' rounds: each of its epochs
forks its workers, which makes every page of this process copy-on-write, and the
contender timed next paid a page fault for each page it then wrote (3.6 instead of 0.4
a window for ours, whose freed batch memory stays in the process), which a trainer that
forks nothing would not pay. Windows per CPU-second counts the CPU time of this process
and its children (the DataLoader's workers), not the busy processes.
"""
from __future__ import annotations

import argparse
import gc
import glob
import json
import multiprocessing
import os
import random
import statistics
import subprocess
import tempfile
import time
import types
from typing import Callable, Collection, Iterable, Optional

import psutil
import tensorflow as tf

import readers
import readers.numpy
from beam_jobs import make_shards
from beam_jobs.sample import write_latent_sample

WINDOW, STRIDE, DIM = 100, 50, 200
BATCH = 64
NUM_SHARDS = 16
BASELINE_SHUFFLE = 2048
TARGETS = {"quiet": {"ours/baseline": 2.0, "ours/floor": 1.0, "numpy/ours": 0.8},
           "busy or small": {"ours/baseline": 1.6, "ours/floor": 0.9, "numpy/ours": 0.8},
           "per CPU-second": {"ours/floor": 0.9}}
AUTOTUNE = tf.data.AUTOTUNE


def baseline_dataset(files: list[str]) -> tf.data.Dataset:
    """The first user story's TFRecordReader.get_dataset, with its crashing bugs fixed.

    Fixed: the reshape to a hard-coded [832, 200] (now [-1, 200]), and the Python `if`
    on a tensor in the windowing (now tf ops only, with the tail window of align_end).
    """
    parse_spec = {"frames": tf.io.FixedLenFeature([], tf.string),
                  "recipe": tf.io.FixedLenFeature([4], tf.float32)}

    def parse(record: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor]:
        example = tf.io.parse_single_example(record, parse_spec)
        frames = tf.reshape(tf.io.parse_tensor(example["frames"], tf.float32), [-1, DIM])
        return frames, example["recipe"]

    def split_into_windows(frames: tf.Tensor, recipe: tf.Tensor) -> tf.data.Dataset:
        last = tf.shape(frames)[0] - WINDOW
        grid = tf.range(0, tf.maximum(last + 1, 0), STRIDE)  # empty when T < WINDOW
        needs_tail = tf.logical_and(last >= 0, last % STRIDE != 0)
        starts = tf.concat([grid, tf.reshape(last, [1])[:tf.cast(needs_tail, tf.int32)]], 0)
        return tf.data.Dataset.from_tensor_slices(starts).map(
            lambda start: (frames[start:start + WINDOW], recipe))

    options = tf.data.Options()
    options.deterministic = False
    return (tf.data.TFRecordDataset(files)
            .with_options(options)
            .map(parse, num_parallel_calls=AUTOTUNE)
            .flat_map(split_into_windows)
            .shuffle(BASELINE_SHUFFLE)
            .batch(BATCH, drop_remainder=True)
            .prefetch(AUTOTUNE))


def floor_dataset(shard_files: list[str]) -> tf.data.Dataset:
    return (tf.data.TFRecordDataset(shard_files, num_parallel_reads=AUTOTUNE)
            .batch(BATCH, drop_remainder=True)
            .prefetch(AUTOTUNE))


def copy_dataset(shard_files: list[str]) -> tf.data.Dataset:
    """F+C: the floor, each batch then copied into one uint8 tensor [batch, record size]."""
    record_bytes = max(int(tf.reduce_max(tf.strings.length(records)))
                       for records in floor_dataset(shard_files))
    return floor_dataset(shard_files).map(
        lambda records: tf.io.decode_raw(records, tf.uint8, fixed_length=record_bytes))


def _cpu_seconds(skip: Collection[int] = ()) -> float:
    """CPU seconds of this process (to the microsecond: psutil counts 10 ms ticks, a tenth
    of a small epoch) and its live children (DataLoader workers, in ticks), less the
    processes in `skip` (the busy ones: children too)."""
    total = time.process_time()
    for child in psutil.Process().children(recursive=True):
        if child.pid in skip:
            continue
        try:
            total += sum(child.cpu_times()[:2])
        except psutil.Error:
            pass
    return total


def time_epoch(batches: Iterable, busy: Collection[int] = ()) -> dict:
    """Windows, wall and CPU seconds (this process and its children but the `busy` ones)
    of one full pass.

    An iterator step hands back a batch already computed, so reading a shape is enough
    to be sure the whole batch was produced.
    """
    windows = 0
    start, cpu_start = time.perf_counter(), _cpu_seconds(busy)
    for batch in batches:
        first = batch["window"] if isinstance(batch, dict) else tf.nest.flatten(batch)[0]
        windows += first.shape[0]
    seconds, cpu = time.perf_counter() - start, _cpu_seconds(busy) - cpu_start
    return {"windows": windows, "seconds": seconds, "cpu_seconds": cpu,
            "windows_per_s": windows / seconds, "windows_per_cpu_s": windows / cpu}


def _burn() -> None:
    while True:
        pass


class Busy:
    """`n` processes spinning on the CPU while the context lasts."""

    def __init__(self, n: int):
        self._n, self._procs = n, []

    @property
    def pids(self) -> set[int]:
        return {p.pid for p in self._procs}

    def __enter__(self):
        self._procs = [multiprocessing.Process(target=_burn, daemon=True) for _ in range(self._n)]
        for p in self._procs:
            p.start()
        return self

    def __exit__(self, *exc):
        for p in self._procs:
            p.terminate()
            p.join()


def torch_loader(out_dir: str):
    """A DataLoader over WindowSource with 2 workers, or None without torch."""
    try:
        import torch.utils.data
    except ImportError:
        return None
    source = readers.numpy.WindowSource(out_dir, "train")
    return torch.utils.data.DataLoader(source, batch_size=BATCH, shuffle=True, num_workers=2,
                                       drop_last=True, prefetch_factor=4)


def make_data(work_dir: str, videos: int, files: int) -> tuple[list[str], str]:
    """Write the latent sample and its shards; return (input files, output dir)."""
    input_files = write_latent_sample(os.path.join(work_dir, "latents"), videos=videos,
                                      files=files)
    out_dir = os.path.join(work_dir, "shards")
    make_shards.run([
        "--input", os.path.join(work_dir, "latents", "*.tfrecord"), "--output_dir", out_dir,
        "--window", str(WINDOW), "--stride", str(STRIDE), "--num_shards", str(NUM_SHARDS),
        "--overwrite"])
    return input_files, out_dir


def checkpoint_bytes(out_dir: str, work_dir: str) -> int:
    """The size of a tf.train.Checkpoint of a make_dataset iterator after a few steps:
    its shuffle buffer, the interleave's open shards, the prefetched batches."""
    iterator = iter(readers.make_dataset(out_dir, "train", batch_size=BATCH, seed=0,
                                         repeat=True))
    for _ in range(3):
        next(iterator)
    prefix = tf.train.Checkpoint(iterator=iterator).save(os.path.join(work_dir, "ckpt", "c"))
    directory = os.path.dirname(prefix)
    return sum(os.path.getsize(os.path.join(directory, n)) for n in os.listdir(directory)
               if n.startswith(os.path.basename(prefix)))


def dataset_module_at(rev: str) -> types.ModuleType:
    """readers/tfdata/dataset.py as it was at commit `rev`, imported as a module of its
    own (its imports are this tree's modules)."""
    repo = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    shown = subprocess.run(["git", "-C", repo, "show", f"{rev}:readers/tfdata/dataset.py"],
                           capture_output=True, text=True)
    if shown.returncode:
        raise SystemExit(f"--before {rev}: no readers/tfdata/dataset.py there (a revision "
                         "from f3211bf on has one)")
    source = shown.stdout
    module = types.ModuleType(f"readers_dataset_at_{rev}")
    exec(compile(source, f"{rev}:readers/tfdata/dataset.py", "exec"), module.__dict__)
    return module


def contenders(input_files: list[str], out_dir: str, before: Optional[types.ModuleType] = None
               ) -> dict[str, Callable[[], Iterable]]:
    shard_files = sorted(glob.glob(os.path.join(out_dir, "train-*.tfrecord")))
    baseline, floor = baseline_dataset(input_files), floor_dataset(shard_files)
    copy = copy_dataset(shard_files)
    ours = readers.make_dataset(out_dir, "train", batch_size=BATCH)
    epochs = iter(range(1_000_000))
    made = {
        "baseline": lambda: baseline,
        "ours": lambda: ours,
        "floor": lambda: floor,
        "copy": lambda: copy,
        "numpy": lambda: readers.numpy.batches(out_dir, "train", BATCH, epoch=next(epochs)),
    }
    if before is not None:
        earlier = before.make_dataset(out_dir, "train", batch_size=BATCH)
        made["before"] = lambda: earlier
    loader = torch_loader(out_dir)
    if loader is not None:
        made["torch"] = lambda: loader
    return made


def run_contenders(made: dict[str, Callable[[], Iterable]], repeats: int,
                   busy: Collection[int] = ()) -> dict[str, list]:
    """One warm-up epoch each, then `repeats` rounds of one epoch each, interleaved.

    Each round takes the contenders in a new order (seeded), so that none always runs
    right after the same other one, whose freed memory and finishing threads it would
    inherit. Garbage is collected before each epoch, outside its timing.
    """
    for name, make in made.items():
        run = time_epoch(make(), busy)
        print(f"  warm-up {name:9s} {run['windows']:6d} windows {run['seconds']:6.2f} s",
              flush=True)
    runs: dict[str, list[dict]] = {name: [] for name in made}
    order, rng = list(made), random.Random(0)
    for r in range(repeats):
        rng.shuffle(order)
        for name in order:
            gc.collect()
            run = time_epoch(made[name](), busy)
            runs[name].append(run)
            print(f"  round {r + 1} {name:9s} {run['windows_per_s']:8.0f} windows/s "
                  f"{run['windows_per_cpu_s']:8.0f} windows/cpu-s", flush=True)
    return runs


def summarize(runs: dict[str, list[dict]]) -> dict:
    """Medians of windows/s and windows per CPU-second, and the ratios of the targets."""
    medians = {name: statistics.median(r["windows_per_s"] for r in rs)
               for name, rs in runs.items()}
    cpu = {name: statistics.median(r["windows_per_cpu_s"] for r in rs)
           for name, rs in runs.items()}
    ratios = {"ours/baseline": medians["ours"] / medians["baseline"],
              "ours/floor": medians["ours"] / medians["floor"],
              "numpy/ours": medians["numpy"] / medians["ours"]}
    if "torch" in medians:
        ratios["torch/ours"] = medians["torch"] / medians["ours"]
    if "before" in medians:
        ratios["ours/before"] = medians["ours"] / medians["before"]
    return {"median_windows_per_s": medians, "median_windows_per_cpu_s": cpu,
            "ratios": ratios, "cpu_ratios": {"ours/floor": cpu["ours"] / cpu["floor"],
                                             "ours/baseline": cpu["ours"] / cpu["baseline"],
                                             "copy/floor": cpu["copy"] / cpu["floor"],
                                             "ours/copy": cpu["ours"] / cpu["copy"]}}


def print_table(label: str, runs: dict[str, list[dict]], summary: dict) -> None:
    print(f"\n{label}")
    print(f"{'contender':10s} {'windows':>8s} {'median win/s':>13s} {'min':>7s} {'max':>7s} "
          f"{'median win/cpu-s':>17s}")
    for name, rs in runs.items():
        rates = [r["windows_per_s"] for r in rs]
        print(f"{name:10s} {rs[0]['windows']:8d} {summary['median_windows_per_s'][name]:13.0f} "
              f"{min(rates):7.0f} {max(rates):7.0f} "
              f"{summary['median_windows_per_cpu_s'][name]:17.0f}")
    print("ratios: " + ", ".join(f"{k} {v:.2f}x" for k, v in summary["ratios"].items())
          + "; per CPU-second " + ", ".join(
              f"{k} {summary['cpu_ratios'][k]:.2f}x" for k in ("ours/floor", "copy/floor",
                                                               "ours/copy")))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--videos", default="512,128",
                        help="videos per dataset, comma-separated (default: %(default)s)")
    parser.add_argument("--busy", default="0,1",
                        help="busy processes during the runs, comma-separated "
                             "(default: %(default)s)")
    parser.add_argument("--files", type=int, default=8)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--json", required=True, help="where the results go")
    parser.add_argument("--work_dir", default=None,
                        help="where the data is written (default: a temp dir, removed after)")
    parser.add_argument("--before", default=None, metavar="REV",
                        help="also time make_dataset of this commit's "
                             "readers/tfdata/dataset.py")
    args = parser.parse_args()
    before = dataset_module_at(args.before) if args.before else None

    results = []
    with tempfile.TemporaryDirectory() as temp_dir:
        for videos in (int(v) for v in args.videos.split(",")):
            work_dir = os.path.join(args.work_dir or temp_dir, f"videos-{videos}")
            input_files, out_dir = make_data(work_dir, videos, args.files)
            checkpoint = checkpoint_bytes(out_dir, work_dir)
            print(f"checkpoint of a make_dataset iterator: {checkpoint / 2**20:.1f} MiB")
            made = contenders(input_files, out_dir, before)
            for busy in (int(b) for b in args.busy.split(",")):
                label = f"{videos} videos, {busy} busy"
                print(label, flush=True)
                with Busy(busy) as burners:
                    runs = run_contenders({name: make for name, make in made.items()
                                           if name != "torch"}, args.repeats, burners.pids)
                    if "torch" in made:   # last: its forks would cost the others (above)
                        runs.update(run_contenders({"torch": made["torch"]}, args.repeats,
                                                   burners.pids))
                summary = summarize(runs)
                print_table(label, runs, summary)
                results.append({"videos": videos, "busy": busy, "runs": runs,
                                "checkpoint_bytes": checkpoint, **summary})
    with open(args.json, "w") as f:
        json.dump({"config": {"files": args.files, "repeats": args.repeats, "batch_size": BATCH,
                              "before": args.before,
                              "window": WINDOW, "stride": STRIDE, "num_shards": NUM_SHARDS,
                              "cpus": os.cpu_count()}, "targets": TARGETS,
                   "results": results}, f, indent=2)
    print(f"wrote {args.json}")


if __name__ == "__main__":
    main()
