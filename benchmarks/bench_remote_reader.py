"""readers.numpy on gs://, side by side: a window at a time against a batch at a time.

    python benchmarks/bench_remote_reader.py [--videos 64] [--latency_ms 30] [--batches 4]
        [--repeats 5] [--json bench_remote_reader.json]

Writes a latent sample's shards (beam_jobs.make_shards, as benchmarks/bench_reader.py
does), copies them to a GCS emulator (tests/gcs_emulator.py) that makes every request
wait --latency_ms and serves requests at once, as GCS does, then reads --batches batches
of 64 random windows per round through a `readers.numpy.WindowSource` on gs://:

  one by one   source[i] for each window of the batch, one after another: a PyTorch
               DataLoader worker over a dataset with only __getitem__, and read_batch
               before it asked for a batch's records together
  read_batch   source.read_batch(indices): the batch's ranged reads all at once
  getitems     source.__getitems__(indices): what a DataLoader worker now calls
  stream       batches(order="stream"): 8 MB chunks of the shards, one request each,
               mixed in 64 MB groups (readers.numpy.streaming), in a process of its own (the
               emulator is Python in this one): the second of two epochs, as a trainer's
               process reads many (its connections to the store open)

and, beside them, readers.make_dataset (tf.data) over the same shards on local disk:
TensorFlow's own gs:// cannot be pointed at an emulator (its Google hosts are built in).

Rounds alternate the contenders; the table shows medians of windows/s, and the requests
per window that the emulator counted.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

import numpy as np

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(REPO, "tests"))
sys.path.insert(0, os.path.join(REPO, "benchmarks"))

import gcs_emulator  # noqa: E402  (tests/ helper: the emulator with request counts)
from bench_reader import BATCH, make_data  # noqa: E402

import readers.numpy  # noqa: E402


def upload(local_dir: str, remote: str) -> None:
    """The shards, their indexes and dataset.json, one file at a time."""
    import fsspec
    fs = fsspec.filesystem("gs", skip_instance_cache=True)
    for name in sorted(os.listdir(local_dir)):
        fs.put_file(os.path.join(local_dir, name), f"{remote}/{name}")


def time_reads(read, batches: list[np.ndarray]) -> dict:
    gcs_emulator.reset_counts()
    start = time.perf_counter()
    for indices in batches:
        read(indices)
    seconds = time.perf_counter() - start
    windows = sum(len(b) for b in batches)
    return {"windows_per_s": windows / seconds,
            "requests_per_window": gcs_emulator.counts().get("read", 0) / windows}


def stream_epochs(path: str, epochs: int) -> list[float]:
    """windows/s of each of `epochs` epochs of `batches(order="stream")`, after gcsfs is
    imported and connected (a source opened once)."""
    readers.numpy.WindowSource(path, "train")
    rates = []
    for epoch in range(epochs):
        start, windows = time.perf_counter(), 0
        for batch in readers.numpy.batches(path, "train", BATCH, seed=0, epoch=epoch,
                                           order="stream"):
            windows += len(batch["start"])
        rates.append(windows / (time.perf_counter() - start))
    return rates


def time_epoch(path: str, windows: int) -> dict:
    """An epoch of `batches(order="stream")` in a process of its own (the emulator,
    Python in this process, would otherwise share its interpreter lock with the reader,
    as GCS does not), the second of two: windows/s and requests a window."""
    gcs_emulator.reset_counts()
    child = subprocess.run(
        [sys.executable, __file__, "--stream_child", path, "--repeats", "2"],
        capture_output=True, text=True, check=True, env=os.environ)
    rate = json.loads(child.stdout.strip().splitlines()[-1])[-1]
    return {"windows_per_s": rate,
            "requests_per_window": gcs_emulator.counts().get("read", 0) / (2 * windows)}


def local_tf_data(path: str, repeats: int) -> float:
    """readers.make_dataset over the same shards on local disk (TensorFlow's gs:// cannot
    be pointed at an emulator): median windows/s of `repeats` epochs."""
    import readers as tf_readers
    rates = []
    for epoch in range(repeats + 1):
        start, windows = time.perf_counter(), 0
        for batch in tf_readers.make_dataset(path, "train", BATCH, seed=epoch):
            windows += int(batch["start"].shape[0])
        rates.append(windows / (time.perf_counter() - start))
    return statistics.median(rates[1:])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--videos", type=int, default=64)
    parser.add_argument("--latency_ms", type=float, default=30.0,
                        help="each request's wait (default: %(default)s, about GCS's "
                             "first-byte latency for a small ranged read)")
    parser.add_argument("--batches", type=int, default=4, help="batches per round")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--json", default=None, help="where the results go")
    parser.add_argument("--stream_child", default=None, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.stream_child:
        print(json.dumps(stream_epochs(args.stream_child, args.repeats)))
        return

    with tempfile.TemporaryDirectory() as work_dir, \
            gcs_emulator.running("bkt", latency_s=args.latency_ms / 1000):
        _, out_dir = make_data(work_dir, args.videos, files=4)
        upload(out_dir, "bkt/shards")
        source = readers.numpy.WindowSource("gs://bkt/shards", "train")
        source.read_batch(range(len(source)))       # indexes loaded, layouts learnt
        rng = np.random.default_rng(0)
        contenders = {"one by one": lambda batch: [source[int(i)] for i in batch],
                      "read_batch": source.read_batch,
                      "getitems": source.__getitems__,
                      "stream": None}
        runs: dict[str, list[dict]] = {name: [] for name in contenders}
        order = list(contenders)
        for r in range(args.repeats):
            batches = [rng.choice(len(source), BATCH, replace=False)
                       for _ in range(args.batches)]
            order = order[1:] + order[:1]
            for name in order:
                run = (time_epoch("gs://bkt/shards", len(source)) if name == "stream"
                       else time_reads(contenders[name], batches))
                runs[name].append(run)
                print(f"  round {r + 1} {name:10s} {run['windows_per_s']:8.0f} windows/s "
                      f"{run['requests_per_window']:.2f} requests/window", flush=True)

        tf_local = local_tf_data(out_dir, args.repeats)
    medians = {name: statistics.median(r["windows_per_s"] for r in rs)
               for name, rs in runs.items()}
    print(f"\n{len(source)} windows on gs:// (emulator, {args.latency_ms:.0f} ms a request), "
          f"batches of {BATCH}")
    print(f"{'contender':10s} {'median win/s':>13s} {'requests/window':>16s} "
          f"{'vs one by one':>14s}")
    for name, rs in runs.items():
        print(f"{name:10s} {medians[name]:13.0f} {rs[0]['requests_per_window']:16.2f} "
              f"{medians[name] / medians['one by one']:13.1f}x")
    print(f"tf.data, the same shards on local disk: {tf_local:.0f} windows/s")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"config": vars(args), "windows": len(source), "runs": runs,
                       "median_windows_per_s": medians, "tf_data_local": tf_local}, f,
                      indent=2)
        print(f"wrote {args.json}")


if __name__ == "__main__":
    main()
