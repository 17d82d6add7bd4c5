"""JSONL sidecar files (videos.jsonl, failures.jsonl, bad_frames.jsonl) written sorted,
without one element or one worker holding their rows.

A global sort of rows that may number millions (one per video at 2 TB of latents:
about 3M) must not be a list in one task. So rows are cut into ordered buckets by
range: approximate quantiles of their sort keys (a combiner of bounded size, whatever
the number of rows) give up to `BUCKETS - 1` boundaries, a small side input; each row
goes to the bucket its key falls in, so every key of bucket b sorts before every key of
bucket b + 1. Each bucket (about 1/BUCKETS of the rows, about 4 MB at 3M rows of 300
bytes) is sorted in its own task and written as one part file in the run's temp dir;
then the parts are concatenated, streaming, in bucket order. Only the part names (at
most BUCKETS) are gathered. Equal keys fall into one bucket, and rows of equal keys sort
by their JSON text, so the file does not depend on the runner or the bundles.
"""
from __future__ import annotations

import bisect
import json
import shutil
from typing import Any, Callable

import apache_beam as beam
from apache_beam.io.filesystem import CompressionTypes
from apache_beam.io.filesystems import FileSystems

from beam_jobs import paths
from beam_jobs.output_dir import RunDir

BUCKETS = 256
_COPY_CHUNK = 1 << 20


def jsonl_line(row: dict) -> bytes:
    return (json.dumps(row, sort_keys=True) + "\n").encode("utf-8")


def _bucket(key: Any, bounds: list) -> int:
    """The bucket of `key`: how many of the inner quantiles are <= it (the first and last
    quantile are the smallest and the largest key)."""
    return bisect.bisect_right(bounds, key, 1, max(1, len(bounds) - 1)) - 1


class _WritePart(beam.DoFn):
    """One bucket's rows -> their part file, sorted; (bucket, path)."""

    def __init__(self, parts_dir: str):
        self._parts_dir = parts_dir

    def process(self, element):
        bucket, rows = element
        path = paths.join(self._parts_dir, f"{bucket:05d}.jsonl")
        with FileSystems.create(path, compression_type=CompressionTypes.UNCOMPRESSED) as f:
            for _, line in sorted(rows):
                f.write(line)
        yield bucket, path


def concatenate(parts: list[tuple[int, str]], path: str) -> None:
    """Write the part files into `path` in bucket order, streaming (a chunk at a time)."""
    with FileSystems.create(path, compression_type=CompressionTypes.UNCOMPRESSED) as out:
        for _, part in sorted(parts):
            with FileSystems.open(part, compression_type=CompressionTypes.UNCOMPRESSED) as f:
                shutil.copyfileobj(f, out, _COPY_CHUNK)


class WriteSortedJsonl(beam.PTransform):
    """Rows (dicts) -> the JSONL file `name` in the run's folder (the commit moves it into
    the output directory), one line per row in `sort_key` order; gives that name once it
    is written. With `when_empty=False` no
    rows write no file and give nothing."""

    def __init__(self, run: RunDir, name: str, sort_key: Callable[[dict], Any],
                 when_empty: bool = True):
        super().__init__()
        self._run, self._name, self._sort_key = run, name, sort_key
        self._when_empty = when_empty

    def expand(self, rows):
        sort_key, name, run = self._sort_key, self._name, self._run
        keyed = rows | "Line" >> beam.Map(lambda row: (sort_key(row), jsonl_line(row)))
        bounds = (keyed | "SortKeys" >> beam.Keys()
                  | "Bounds" >> beam.ApproximateQuantiles.Globally(BUCKETS + 1))
        parts = (keyed
                 | "ToBucket" >> beam.Map(lambda kv, b: (_bucket(kv[0], b), kv),
                                          beam.pvalue.AsSingleton(bounds, default_value=[]))
                 | "GroupBuckets" >> beam.GroupByKey()
                 | "WriteParts" >> beam.ParDo(_WritePart(
                     paths.join(run.temp_dir, "sidecars", name)))
                 | "GatherParts" >> beam.combiners.ToList())
        when_empty = self._when_empty

        def write(part_list):
            if part_list or when_empty:
                concatenate(part_list, run.in_run_folder(name))
                yield name

        return parts | "Concatenate" >> beam.FlatMap(write)
