"""Deleting what a run wrote: only what it can prove it wrote (its folder lists it), and
never a file the committed dataset.json lists. Best-effort everywhere after a commit:
what is left, the next run there removes.
"""
from __future__ import annotations

import json
import logging
import os
from typing import Optional

from beam_jobs.core import paths, storage
from beam_jobs.core.run_dir import (
    CANCELLED,
    LOST_LEASE,
    RUN_JSON,
    RUNS,
    SHARDS_JSON,
    STATE_DIR,
    RunDir,
)
from beam_jobs.outdir import swap
from beam_jobs.outdir.holder import holder_of
from beam_jobs.outdir.inventory import committed_dataset, job_files, past_runs, read_json
from readers import format as data_format

TEMP_MARKER = "make_shards_run.json"   # names the run a local temp directory is of
_LOG = logging.getLogger("beam_jobs.outdir")


def _held_version(run: RunDir) -> Optional[str]:
    """The version (swap token) of the lease file when `run` holds it, else None."""
    current = swap.read_with_token(run.lease_path)
    if current is not None and holder_of(current[0]) == run.run_id:
        return current[1]
    return None


def holds_lease(run: RunDir) -> bool:
    """Whether `run` still holds its directory's lease."""
    return _held_version(run) is not None


def release_lease(run: RunDir) -> None:
    """Release the lease from inside the pipeline (when `run.releases_lease`), if this run
    still holds it: a compare-and-swap on the version read, so a lease another run took
    meanwhile stays. Then the state folder goes, where nothing is left in it."""
    if not run.releases_lease:
        return
    version = _held_version(run)
    if version is not None:
        swap.delete_if(run.lease_path, version)
    storage.remove_empty_dirs([paths.join(run.state_dir, RUNS), run.state_dir],
                              run.output_dir)


def committed(run: RunDir) -> bool:
    """Whether the directory's dataset.json names this run: one read, no listing (the
    commit asks, and a directory may hold tens of thousands of objects)."""
    path = paths.join(run.output_dir, data_format.DATASET_JSON)
    try:
        spec = data_format.DatasetSpec.from_json(storage.read_bytes(path), source=path)
    except (FileNotFoundError, data_format.SpecError):   # none, or not one this job wrote
        return False
    return spec.run_id == run.run_id


def delete_temp(run: RunDir) -> None:
    if paths.is_inside(run.temp_dir, run.run_path):
        storage.delete_tree(run.temp_dir, run.output_dir)
    else:
        delete_local_temp(run.temp_dir, run.run_id)


def delete_run_folder(run: RunDir) -> None:
    if not paths.is_inside(run.temp_dir, run.run_path):
        delete_local_temp(run.temp_dir, run.run_id)
    storage.delete_tree(run.run_path, run.output_dir, last=RUN_JSON)


def clean_up_after_commit(run: RunDir) -> None:
    """Delete the files of the dataset this run replaced (those its dataset.json does
    not list), its temp data, then its folder, run.json last. Best-effort: a failure
    is a warning, and the next run in the directory finishes the job."""
    try:
        out = run.output_dir
        entries = storage.list_dir(out)
        _, kept = committed_dataset(out, entries)
        run_json = read_json(run.in_run_folder(RUN_JSON)) or {}
        replaced = job_files(run_json.get("replaces", [])) - kept
        storage.delete_files(sorted(run.output(n) for n in replaced if n in entries), out)
        delete_run_folder(run)
    except Exception as e:  # the dataset is committed: nothing here may undo it
        _LOG.warning("the dataset in %s is committed, but cleaning up after it failed "
                     "(%s); the next run there finishes the cleanup", run.output_dir,
                     str(e).splitlines()[0] if str(e) else type(e).__name__)


def abandon(run: RunDir) -> None:
    """Clear what a run that stopped half-way wrote: its listed shards and temp data,
    and its folder unless it holds the run's failures.jsonl. A run that committed is
    only cleaned up after: nothing its dataset.json lists is touched. Best-effort: what
    is left, the next run removes. A run that lost its lease touches nothing: the
    directory is another run's now."""
    try:
        if not holds_lease(run):
            return
        # The staged dataset.json first: a commit still in flight (a worker's) then has
        # nothing to move, and whether this run committed cannot change after.
        storage.delete_files([run.in_run_folder(data_format.DATASET_JSON)], run.output_dir)
        if committed(run):
            clean_up_after_commit(run)
            return
        listed = job_files(read_json(run.in_run_folder(SHARDS_JSON)))
        storage.delete_files(sorted(run.output(name) for name in listed), run.output_dir)
        if storage.kind(run.in_run_folder(
                data_format.sidecar_name("failures", run.run_id))) == "file":
            delete_temp(run)
        else:
            delete_run_folder(run)
    except Exception as e:
        _LOG.warning("could not remove what the run left in %s (%s); the next run there "
                     "removes it", run.output_dir, e)


def fence_commit(run: RunDir) -> bool:
    """Keep a job that may still run from committing (its launcher's Ctrl-C, where the
    runner cannot confirm the job stopped); whether it committed before. The marker
    its commit step reads once it has staged dataset.json (`commit_fenced`), then the
    staged dataset.json deleted: a commit already past that read has nothing to move
    (as `abandon` does), and whether the job committed cannot change after."""
    try:
        storage.write_bytes(run.in_run_folder(CANCELLED), b"{}", make_dirs=False)
    except FileNotFoundError:   # its folder is gone: the job committed, or lost its lease
        pass
    storage.delete_files([run.in_run_folder(data_format.DATASET_JSON)], run.output_dir)
    return committed(run)


def commit_fenced(run: RunDir) -> bool:
    """Whether the run's launcher fenced its commit off (`fence_commit`)."""
    return storage.kind(run.in_run_folder(CANCELLED)) != "missing"


def delete_local_temp(temp_dir, run_id: str) -> None:
    """A local temp directory outside the output directory, if it is provably this run's:
    a local absolute path named `make_shards-RUN` holding the marker that names RUN. A
    run.json naming anything else (hand-edited, or a folder that was moved) is left as it
    is, with a warning."""
    if not (isinstance(temp_dir, str) and not paths.is_remote(temp_dir)
            and os.path.isabs(temp_dir) and os.path.normpath(temp_dir) == temp_dir
            and os.path.basename(temp_dir) == f"make_shards-{run_id}"):
        _LOG.warning("the run.json of run %s names a temp directory that is not its own "
                     "(%.200r); left as it is", run_id, temp_dir)
        return
    marker = os.path.join(temp_dir, TEMP_MARKER)
    try:
        with open(marker) as f:
            if json.load(f).get("run_id") != run_id:
                return
    except (OSError, ValueError):
        return
    if not os.path.islink(temp_dir):
        storage.delete_tree(temp_dir, os.path.dirname(temp_dir))


def mark_lost(out: str, run_id: str, marker: bytes) -> None:
    """Mark the (cleared) folder of a run that lost its lease while it may still run;
    the marker names its process (holder.lost_marker), so that a later run can tell
    when it no longer may (holder.may_still_write) and clear the marker too."""
    storage.write_bytes(paths.join(out, STATE_DIR, RUNS, run_id, LOST_LEASE), marker)


def leftover_paths(out: str, run_ids: set[str]) -> list[str]:
    """What the earlier runs `run_ids` left in `out`: the files they listed or that carry
    their ids (never one the committed dataset lists), then the files in their folders
    but run.json (which goes last, with the folder: `clear_folder`)."""
    entries = storage.list_dir(out)
    _, committed = committed_dataset(out, entries)
    found = []
    for past in past_runs(out, []):
        if past.run_id not in run_ids:
            continue
        names = past.files | {n for n in entries if data_format.run_id_in(n) == past.run_id}
        found += [paths.join(out, name) for name in sorted(names - committed) if name in entries]
        folder = paths.join(out, STATE_DIR, RUNS, past.run_id)
        found += [p for p in storage.walk_files(folder) if p != paths.join(folder, RUN_JSON)]
    return found


def clear_folder(out: str, run_id: str, lost: Optional[bytes]) -> None:
    """Delete an earlier run's folder, run.json last; one that lost its lease while it
    may still run keeps its marker (`lost`; outdir/claim.py's `_clear` says why)."""
    storage.delete_tree(paths.join(out, STATE_DIR, RUNS, run_id), out, last=RUN_JSON)
    if lost is not None:
        mark_lost(out, run_id, lost)
