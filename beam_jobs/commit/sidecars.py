"""JSONL sidecar files (videos.jsonl, failures.jsonl, bad_frames.jsonl) written sorted,
without one element or one worker holding their rows, all in one pass.

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

The files share the pass: a row's key is (its file's place, its sort key), so one set
of quantiles, one grouping and one gathering serve them all (a bucket at a boundary
writes a part for each file it holds). Each step of a Beam graph costs the job a fixed
time to build and to run, the same at 10 rows as at 3M; three passes cost three times.
"""
from __future__ import annotations

import bisect
import json
import shutil
from typing import Any, Callable, NamedTuple, Sequence

import apache_beam as beam
from apache_beam.io.filesystem import CompressionTypes
from apache_beam.io.filesystems import FileSystems
from apache_beam.transforms.stats import ApproximateQuantilesCombineFn

from beam_jobs.core import paths
from beam_jobs.core.gather import ApplyToAll
from beam_jobs.core.run_dir import RunDir

BUCKETS = 256
_COPY_CHUNK = 1 << 20


def jsonl_line(row: dict) -> bytes:
    return (json.dumps(row, sort_keys=True) + "\n").encode("utf-8")


def _bucket(key: Any, bounds: list) -> int:
    """The bucket of `key`: how many of the inner quantiles are <= it (the first and last
    quantile are the smallest and the largest key)."""
    return bisect.bisect_right(bounds, key, 1, max(1, len(bounds) - 1)) - 1


class JsonlFile(NamedTuple):
    """A sidecar file: its name in the run's folder, the order of its rows, and whether
    no rows write an empty file (True) or none."""
    name: str
    sort_key: Callable[[dict], Any]
    when_empty: bool = True


class _WriteParts(beam.DoFn):
    """One bucket's rows -> a part file per file it holds rows of, sorted; (file's place,
    bucket, path) of each."""

    def __init__(self, parts_dir: str, names: Sequence[str]):
        self._parts_dir, self._names = parts_dir, names

    def process(self, element):
        bucket, rows = element
        out, place = None, None
        for (key, line) in sorted(rows):
            if key[0] != place:
                if out is not None:
                    out.close()
                place = key[0]
                path = paths.join(self._parts_dir, self._names[place], f"{bucket:05d}.jsonl")
                out = FileSystems.create(path, compression_type=CompressionTypes.UNCOMPRESSED)
                yield place, bucket, path
            out.write(line)
        if out is not None:
            out.close()


def concatenate(parts: list[tuple[int, str]], path: str) -> None:
    """Write the part files into `path` in bucket order, streaming (a chunk at a time)."""
    with FileSystems.create(path, compression_type=CompressionTypes.UNCOMPRESSED) as out:
        for _, part in sorted(parts):
            with FileSystems.open(part, compression_type=CompressionTypes.UNCOMPRESSED) as f:
                shutil.copyfileobj(f, out, _COPY_CHUNK)


class WriteSortedJsonl(beam.PTransform):
    """A tuple of PCollections of rows (dicts), one per file of `files` -> each file in
    the run's folder (the commit moves it into the output directory), one line per row
    in its `sort_key` order; gives one element once they are written: the list of the
    names written (a file without rows and `when_empty=False` is not)."""

    def __init__(self, run: RunDir, files: Sequence[JsonlFile]):
        super().__init__()
        self._run, self._files = run, tuple(files)

    def expand(self, rows):
        run, files = self._run, self._files
        keyed = [file_rows | f"Line{place}" >> beam.Map(
                     lambda row, place, key: ((place, key(row)), jsonl_line(row)),
                     place=place, key=file.sort_key)
                 for place, (file_rows, file) in enumerate(zip(rows, files, strict=True))]
        keyed = keyed | "AllRows" >> beam.Flatten()
        bounds = (keyed | "SortKeys" >> beam.Keys()
                  | "Bounds" >> beam.CombineGlobally(ApproximateQuantilesCombineFn.create(
                      BUCKETS + 1)).without_defaults())
        parts = (keyed
                 | "ToBucket" >> beam.Map(lambda kv, b: (_bucket(kv[0], b), kv),
                                          beam.pvalue.AsSingleton(bounds, default_value=[]))
                 | "GroupBuckets" >> beam.GroupByKey()
                 | "WriteParts" >> beam.ParDo(_WriteParts(
                     paths.join(run.temp_dir, "sidecars"), [f.name for f in files])))

        def write(part_list) -> list[str]:
            names = []
            for place, file in enumerate(files):
                mine = [(bucket, path) for p, bucket, path in part_list if p == place]
                if mine or file.when_empty:
                    concatenate(mine, run.in_run_folder(file.name))
                    names.append(file.name)
            return names

        return parts | "Concatenate" >> ApplyToAll(write)
