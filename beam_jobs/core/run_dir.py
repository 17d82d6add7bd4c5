"""Where one run writes in its output directory: a picklable value every step that
writes is handed, and the layout of the directory's state folder.

    OUT/_make_shards/lease.json      the lease of the run writing now (outdir/lease.py)
    OUT/_make_shards/runs/RUN/       one folder per run, written before any data:
        run.json                     run id, where its temp data lives, its side files, and
                                     the files of the dataset it replaces; deleted last
        shards.json                  the shard files it will write (before it writes them)
        failures-RUN.jsonl ...       the sidecars of a run that did not commit
        tmp/                         its temp data (unless on local disk elsewhere)
        cancelled.json               its launcher's Ctrl-C, where the runner could not
                                     confirm the job stopped: its commit commits nothing
        lost_lease.json              only this, once cleared, for a run whose stale
                                     lease another took over while it may still run:
                                     a file it writes later is still known as its own
                                     (it names the run's process: once that is gone,
                                     the next run removes the marker too)

What a run may claim, write and delete there is the output directory's part (outdir/);
this is only the map, shared by the parts that write.
"""
from __future__ import annotations

import dataclasses
import json
from typing import Iterable, Optional

from beam_jobs.core import paths, storage
from readers import format as data_format

STATE_DIR = "_make_shards"
RUNS = "runs"
LEASE_FILE = "lease.json"
RUN_JSON = "run.json"
SHARDS_JSON = "shards.json"
LOST_LEASE = "lost_lease.json"
CANCELLED = "cancelled.json"
TEMP = "tmp"


@dataclasses.dataclass(frozen=True)
class RunDir:
    """Where one run writes: picklable, handed to the pipeline's steps."""
    output_dir: str
    run_id: str
    temp_dir: str      # the run's temp data: under its run folder, or a local directory
    # Whether the pipeline itself releases the lease (a distributed runner: the
    # launcher may be gone by then), or the launcher does.
    releases_lease: bool = False
    # On GCS, dataset.json's generation when the run took the lease (0: none): its
    # commit replaces only that one (storage.place), so a run that lost its lease never
    # commits over the run that took it. Locally the commit's move finds nothing to
    # move instead: the run that takes a lease deletes the loser's folder first.
    dataset_generation: Optional[int] = None
    # Earlier runs whose leftovers the pipeline clears, each with its lost lease's marker
    # while it may still write (a distributed run: outdir/claim.py leaves them to
    # commit/leftovers.py).
    leftovers: tuple[tuple[str, Optional[bytes]], ...] = ()

    @property
    def state_dir(self) -> str:
        return paths.join(self.output_dir, STATE_DIR)

    @property
    def run_path(self) -> str:
        return paths.join(self.state_dir, RUNS, self.run_id)

    @property
    def lease_path(self) -> str:
        return paths.join(self.state_dir, LEASE_FILE)

    def output(self, name: str) -> str:
        return paths.join(self.output_dir, name)

    def in_run_folder(self, name: str) -> str:
        return paths.join(self.run_path, name)

    def shard_name(self, split: str, index: int, num_shards: int, compression: str) -> str:
        return data_format.shard_name(split, index, num_shards, compression, self.run_id)

    def list_shards(self, names: Iterable[str]) -> None:
        """List the shard files this run is about to write, in its folder, before it
        writes any: a rerun after a kill can then tell them from foreign files."""
        storage.write_bytes(self.in_run_folder(SHARDS_JSON),
                            json.dumps(sorted(names)).encode("utf-8"))
