"""Earlier runs' leftovers in the output directory, deleted by the pipeline of a
distributed run instead of its launcher: listed by one task, deleted in batches spread
over the workers, then their folders.

At 2 TB a failed run leaves about 70,000 objects (18,465 shards and as many indexes,
31,736 temp buckets: docs/dataflow.md). From the launcher, one batch request of 100 at a
time, that is 700 requests in a row; here 70 batches of 1,000 paths, each its own task.
Best-effort, as every cleanup: what stays is still listed by its run folder, and the
next run tries again.
"""
from __future__ import annotations

import logging
from typing import Optional

import apache_beam as beam

from beam_jobs import outdir
from beam_jobs.core import storage
from beam_jobs.core.gather import ApplyToAll
from beam_jobs.core.run_dir import RunDir

BATCH = 1000   # paths a task deletes (GCS: 10 batch requests of 100)
_LOG = logging.getLogger("beam_jobs.outdir")


class ClearLeftovers(beam.PTransform):
    """The pipeline -> the leftovers of `run.leftovers`' runs deleted (no output)."""

    def __init__(self, run: RunDir):
        super().__init__()
        self._run = run

    def expand(self, pipeline):
        out, runs = self._run.output_dir, self._run.leftovers
        return (pipeline | "Once" >> beam.Create([None])
                | "List" >> beam.FlatMap(lambda _: _batches(out, {r for r, _ in runs}))
                | "Spread" >> beam.Reshuffle()
                | "Delete" >> beam.Map(_delete, out)
                | "Folders" >> ApplyToAll(lambda _: _clear_folders(out, runs)))


def _batches(out: str, run_ids: set[str]):
    try:
        found = outdir.leftover_paths(out, run_ids)
    except (OSError, ValueError) as e:
        _warn(out, e)
        return
    for start in range(0, len(found), BATCH):
        yield found[start:start + BATCH]


def _delete(batch: list[str], out: str) -> None:
    try:
        storage.delete_files(batch, out)
    except (OSError, ValueError) as e:
        _warn(out, e)


def _clear_folders(out: str, runs: tuple[tuple[str, Optional[bytes]], ...]) -> None:
    for run_id, lost in runs:
        try:
            outdir.clear_folder(out, run_id, lost)
        except (OSError, ValueError) as e:
            _warn(out, e)


def _warn(out: str, error: Exception) -> None:
    _LOG.warning("could not remove the leftovers of earlier runs in %s (%s); the next run "
                 "tries again", out, error)
