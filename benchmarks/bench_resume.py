"""What resuming an epoch costs readers.numpy: a rank's plan made fresh, resumed from its
state on the same ranks, and resumed on another number of ranks (elastic).

    python benchmarks/bench_resume.py --json bench_resume.json [--windows 1000000,10000000] \\
        [--ranks 8 --new_ranks 4] [--repeats 7] [--work_dir DIR]

For each size, writes the index of a dataset of that many windows (bench_select.py's
`make_index`: dataset.json, offset indexes, window tables, a videos file, the shards as
sparse files, 20 windows a video, 400 shards) and opens a `WindowSource` over it once.
Then the three contenders take turns, --repeats rounds, each round in a new order:

  fresh     EpochBatches(source, 64, seed=0, epoch=3, shard_index=0, num_shards=R)
  strict    EpochBatches.resume(source, state), the state rank 0 of R saved half-way
  elastic   EpochBatches.resume(source, state, shard_index=0, num_shards=R'), the same
            state on R' ranks

Medians of the wall time of each (no window is read: a plan is window numbers).
"""
from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import sys
import tempfile
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO)
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from bench_select import make_index  # noqa: E402

from readers.numpy import EpochBatches, WindowSource  # noqa: E402

BATCH = 64


def measure(source: WindowSource, ranks: int, new_ranks: int, repeats: int, seed: int
            ) -> dict[str, float]:
    """The median seconds of each contender (the module's docstring)."""
    plan = EpochBatches(source, BATCH, seed=0, epoch=3, shard_index=0, num_shards=ranks)
    state = plan.state(plan.steps // 2)
    contenders = {
        "fresh": lambda: EpochBatches(source, BATCH, seed=0, epoch=3, shard_index=0,
                                      num_shards=ranks),
        "strict": lambda: EpochBatches.resume(source, state),
        "elastic": lambda: EpochBatches.resume(source, state, shard_index=0,
                                               num_shards=new_ranks),
    }
    times: dict[str, list[float]] = {name: [] for name in contenders}
    rng = random.Random(seed)
    for _ in range(repeats):
        names = list(contenders)
        rng.shuffle(names)
        for name in names:
            start = time.perf_counter()
            contenders[name]()
            times[name].append(time.perf_counter() - start)
    return {name: statistics.median(seconds) for name, seconds in times.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--windows", default="1000000,10000000")
    parser.add_argument("--ranks", type=int, default=8)
    parser.add_argument("--new_ranks", type=int, default=4)
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--json", required=True)
    parser.add_argument("--work_dir", default=None)
    args = parser.parse_args()
    results = {}
    with tempfile.TemporaryDirectory(dir=args.work_dir) as work:
        for windows in map(int, args.windows.split(",")):
            out = os.path.join(work, f"index-{windows}")
            make_index(out, windows, windows // 20, 400)
            source = WindowSource(out, "train")
            results[windows] = measure(source, args.ranks, args.new_ranks, args.repeats,
                                       seed=windows)
            print(f"{windows:,} windows, {args.ranks} -> {args.new_ranks} ranks: " + ", ".join(
                f"{name} {seconds * 1000:.0f} ms" for name, seconds in results[windows].items()),
                flush=True)
    with open(args.json, "w") as f:
        json.dump({"config": vars(args), "median_seconds": results}, f, indent=2)
    print(f"wrote {args.json}")


if __name__ == "__main__":
    main()
