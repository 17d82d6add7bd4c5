"""The offset index of one shard, binary against text: its size, and the time to open it.

    python benchmarks/bench_index.py [--records 100000] [--record_bytes 80509] [--repeats 9]
        [--json bench_index.json]

Writes the index of a shard of --records frames of --record_bytes each (80,509 bytes: a
latent window [100, 200] float32 with its mask, id and start, framed), both ways:

  binary  little-endian uint64 offsets, then the shard's length (format versions 1, 2)
  text    one `offset length` line per record, what DALI and the `tfrecord` package read
          (format version 3 on)

and times what readers.numpy does when it first needs a shard: read the index file (from
the page cache) and `readers.format.index.decode` it with every check (counts, order,
each record's fewest bytes, the shard's end). The text form is also parsed the simple
way, `np.array(data.split(), np.int64)`, without checks, for scale. Medians of --repeats,
in CPU time (time.process_time), so that other jobs on a shared machine do not inflate it.
The GCS objects per shard are counted, not timed: the shard, plus one index object per
kind of index kept.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from typing import Callable

import numpy as np

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO)

from readers.format import index  # noqa: E402
from readers.format.tfrecord import FRAME_OVERHEAD  # noqa: E402


def _binary(offsets: list[int]) -> bytes:
    """The index of format versions 1 and 2, as the job wrote it before."""
    return np.asarray(offsets, "<u8").tobytes()


def _median_cpu_ms(run: Callable[[], object], repeats: int) -> float:
    times = []
    for _ in range(repeats):
        start = time.process_time()
        run()
        times.append(time.process_time() - start)
    return 1000 * statistics.median(times)


def _opened(path: str, records: int, version: int, size: int) -> Callable[[], np.ndarray]:
    def run() -> np.ndarray:
        with open(path, "rb") as f:
            return index.decode(f.read(), "bench.index", records, version, size,
                                FRAME_OVERHEAD)
    return run


def measure(records: int, record_bytes: int, repeats: int) -> dict:
    offsets = [i * record_bytes for i in range(records + 1)]
    size = offsets[-1]
    forms = {"binary": (_binary(offsets), index.TEXT_SINCE - 1),
             "text": (index.encode(offsets), index.TEXT_SINCE)}
    rows = {}
    with tempfile.TemporaryDirectory() as tmp:
        for kind, (data, version) in forms.items():
            path = os.path.join(tmp, f"{kind}.index")
            with open(path, "wb") as f:
                f.write(data)
            run = _opened(path, records, version, size)
            assert run().tolist() == offsets
            rows[kind] = {"bytes": len(data),
                          "open_decode_check_cpu_ms": _median_cpu_ms(run, repeats)}
        text = forms["text"][0]
        rows["text"]["split_parse_cpu_ms"] = _median_cpu_ms(
            lambda: np.array(text.split(), np.int64), repeats)
    return {"records": records, "record_bytes": record_bytes, "shard_bytes": size,
            "repeats": repeats, "forms": rows,
            "gcs_index_objects_per_shard": {"replace (text only)": 1,
                                            "keep both (binary and text)": 2}}


def table(result: dict) -> str:
    rows = result["forms"]
    lines = [f"{result['records']:,} records of {result['record_bytes']:,} bytes "
             f"(a shard of {result['shard_bytes'] / 1e9:.1f} GB), medians of "
             f"{result['repeats']}, CPU time:", "",
             "| index | bytes | open + decode + checks | GCS index objects per shard |",
             "|---|---|---|---|",
             f"| binary (uint64) | {rows['binary']['bytes']:,} | "
             f"{rows['binary']['open_decode_check_cpu_ms']:.2f} ms | 1 (keep both: 2) |",
             f"| text (`offset length`) | {rows['text']['bytes']:,} | "
             f"{rows['text']['open_decode_check_cpu_ms']:.2f} ms | 1 |",
             "", f"`np.array(text.split(), np.int64)` alone, unchecked: "
             f"{rows['text']['split_parse_cpu_ms']:.2f} ms"]
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=100_000)
    parser.add_argument("--record_bytes", type=int, default=80_509)
    parser.add_argument("--repeats", type=int, default=9)
    parser.add_argument("--json", help="also write the figures here")
    args = parser.parse_args()
    result = measure(args.records, args.record_bytes, args.repeats)
    print(table(result))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(result, f, indent=1)


if __name__ == "__main__":
    main()
