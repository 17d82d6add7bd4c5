"""Claiming an output directory for one run, and giving it back.

The job deletes only files it can prove it wrote (outdir/inventory.py says whose each
file is, core/run_dir.py maps the state folder). A run's shards carry its id in their
names, so it never writes over the dataset it replaces: that dataset stays whole until
the run commits (writes dataset.json), and only then are its files deleted. Nothing
deletes a file the committed dataset.json lists. Before a run starts, the leftovers of
earlier runs are removed (best-effort): files they listed that the committed dataset
does not, their temp data and their folders.
"""
from __future__ import annotations

import contextlib
import dataclasses
import json
import logging
import os
import tempfile
import uuid
from typing import Iterable, Iterator, NamedTuple, Optional

from beam_jobs.core import paths, storage
from beam_jobs.core.run_dir import RUN_JSON, RUNS, STATE_DIR, TEMP, RunDir
from beam_jobs.outdir import lease
from beam_jobs.outdir.cleanup import (
    TEMP_MARKER,
    abandon,
    clear_folder,
    delete_local_temp,
    mark_lost,
)
from beam_jobs.outdir.derived import repair as repair_derived
from beam_jobs.outdir.holder import Ask, Holder, Job, cannot_ask, lost_marker
from beam_jobs.outdir.inventory import OutputDirError, PastRun, take_inventory
from readers import format as data_format

_LOG = logging.getLogger("beam_jobs.outdir")


def check_inputs(out: str, input_files: Iterable[str], patterns: Iterable[str]) -> None:
    """Refuse an output directory that holds an input file or that an input glob covers."""
    for path in input_files:
        if paths.is_inside(paths.normalize(path), out):
            raise OutputDirError(f"--output_dir: {out} holds the input file {path}; "
                                 "write the dataset somewhere else")
    probes = [paths.join(out, n) for n in (data_format.DATASET_JSON, data_format.FAILURES_JSONL,
                                           data_format.sidecar_name("videos", "0" * 12),
                                           data_format.shard_name("train", 0, 1, "none"),
                                           data_format.shard_name("train", 0, 1, "gzip"),
                                           data_format.shard_name("train", 0, 1, "none",
                                                                  "0" * 12))]
    probes.append(paths.join(out, STATE_DIR, RUNS, "r", TEMP, "s", "b.rec"))
    for pattern in patterns:
        regex = paths.glob_regex(pattern)
        if any(regex.match(p) for p in probes):
            raise OutputDirError(f"--output_dir: the input glob {pattern} covers {out}; a "
                                 "second run would read the job's own output as input")


class Claim(NamedTuple):
    """A run's hold on its output directory, from `prepare` until `release`."""
    run: RunDir
    lease: Optional[lease.Lease]   # None: a dry run's, which holds none (make_shards)
    created: bool          # the directory did not exist before
    base: Optional[data_format.DatasetSpec] = None   # --append: the dataset it adds to


@dataclasses.dataclass(frozen=True)
class ClaimRequest:
    """What a run asks of its output directory (`prepare`, `claimed`).

    out: the directory, normalized (paths.normalize).
    overwrite, append: what becomes of a committed dataset: the run replaces it when it
      commits, or adds a generation to it; without either, a dataset is refused.
    input_files, patterns: the run's inputs, refused when they lie in the directory.
    local_temp: a local directory under which the run keeps its temp data, when it must
      not go into `out` (a local run writing to gs://).
    job: the job on a distributed runner; the lease then names it, never expires, and
      the pipeline releases it (RunDir.releases_lease).
    ask, break_lease: how a lease a job holds is taken over (lease.Lease).
    keep_lease: `claimed` leaves the lease held when its block ends (a detached job
      releases it itself when it is done).
    """
    out: str
    overwrite: bool = False
    append: bool = False
    input_files: tuple[str, ...] = ()
    patterns: tuple[str, ...] = ()
    local_temp: Optional[str] = None
    job: Optional[Job] = None
    ask: Ask = cannot_ask
    break_lease: bool = False
    keep_lease: bool = False


def prepare(request: ClaimRequest) -> Claim:
    """Take the directory for a new run: its lease, cleared leftovers, a run folder.
    A committed dataset stays as it is: the run replaces it when it commits (with
    `overwrite`), or adds a generation to it (with `append`; `Claim.base` is its spec,
    read once the lease is held, so that no other run commits under it).

    Raises OutputDirError with a one-line reason. A directory holding foreign files is
    refused before anything is written to it.
    """
    out, job, local_temp = request.out, request.job, request.local_temp
    found = _directory_kind(out)
    check_inputs(out, request.input_files, request.patterns)
    take_inventory(out)
    storage.make_dirs(out)
    created = found == "missing"
    run_id = uuid.uuid4().hex[:12]
    run = RunDir(out, run_id, "")
    held = _lease(run, request)
    if job is not None:
        run = dataclasses.replace(run, releases_lease=True)
    base = None
    try:
        committed = _repaired_committed_spec(out)
        if not held.still_held():   # paused past its expiry: deleting is not its part now
            raise taken_over_error(out)
        replaces, leftovers = _clear(out, request.overwrite or request.append,
                                     held.took_over, in_pipeline=job is not None)
        if request.append and committed is not None:
            base = committed   # the dataset to add a generation to
        temp = _temp_dir(run, local_temp)
        run = dataclasses.replace(run, temp_dir=temp, dataset_generation=storage.generation(
            paths.join(out, data_format.DATASET_JSON)), leftovers=leftovers)
        _write_run_json(run, replaces)
    except BaseException as e:
        # paused past its expiry later on: the run that took over removed its folder, or
        # committed between this run's listing of the directory and its dataset.json read
        taken = isinstance(e, (OSError, OutputDirError)) and not held.still_held()
        release(Claim(run, held, created))
        if taken:
            raise taken_over_error(out) from None
        raise
    return Claim(run, held, created, base)


def _directory_kind(out: str) -> str:
    """What `out` is now, "missing" or "dir"; OutputDirError for a store this job does
    not write to, or a file (or anything else) in the way."""
    if not storage.supported(out):
        raise OutputDirError(f"--output_dir: {out}: only local paths and gs:// are supported")
    found = storage.kind(out)
    if found not in ("missing", "dir"):
        raise OutputDirError(f"--output_dir: {out} is a {'file' if found == 'file' else found}"
                             ", not a directory")
    return found


def _lease(run: RunDir, request: ClaimRequest) -> lease.Lease:
    """The directory's lease, taken for `run`; OutputDirError saying who holds it, or
    why it cannot be read."""
    try:
        return lease.Lease(run.lease_path, run.run_id, request.job, request.ask,
                           request.break_lease).acquire()
    except lease.LeaseHeld as e:
        raise OutputDirError(f"--output_dir: {request.out} is being written by {e}") from None
    except lease.LeaseUnreadable as e:
        raise OutputDirError(f"--output_dir: {e}") from None


def _temp_dir(run: RunDir, local_temp: Optional[str]) -> str:
    """Where a run keeps its temp data: its run folder's, or a new folder under
    `local_temp` marked with the run and its output directory."""
    if local_temp is None:
        return paths.join(run.run_path, TEMP)
    temp = os.path.join(local_temp, f"make_shards-{run.run_id}")
    os.makedirs(temp)
    with open(os.path.join(temp, TEMP_MARKER), "w") as f:
        json.dump({"run_id": run.run_id, "output_dir": run.output_dir}, f)
    return temp


def _repaired_committed_spec(out: str) -> Optional[data_format.DatasetSpec]:
    """The committed dataset's spec (None without one), its derived files repaired
    first: one a kill left stale names the shards of the dataset before, which clearing
    the leftovers deletes."""
    committed = _committed_spec(out)
    if committed is not None:
        repair_derived(out, committed)
    return committed


def _write_run_json(run: RunDir, replaces: list[str]) -> None:
    """The run folder's run.json: the run, its temp data, its side files and the
    committed files it replaces once it commits (inventory.past_runs reads it)."""
    storage.write_bytes(paths.join(run.run_path, RUN_JSON), json.dumps(
        {"run_id": run.run_id, "temp_dir": run.temp_dir,
         "sidecars": [data_format.sidecar_name(kind, run.run_id)
                      for kind in data_format.SIDECAR_KINDS],
         "replaces": replaces}).encode("utf-8"))


def taken_over_error(out: str) -> OutputDirError:
    """What a run whose lease another run took over while it started (paused past its
    expiry after it took the lease) is refused with (docs/guarantees.md)."""
    return OutputDirError(f"--output_dir: {out}: another run took the lease while this one "
                          "started (it was paused past its expiry); run again once that run "
                          "is done")


def _committed_spec(out: str) -> Optional[data_format.DatasetSpec]:
    """The committed dataset's spec (read once the lease is held), or None."""
    path = paths.join(out, data_format.DATASET_JSON)
    try:
        data = storage.read_bytes(path)
    except FileNotFoundError:
        return None
    return data_format.DatasetSpec.from_json(data, source=path)


def release(claim: Claim) -> None:
    """Give the lease back; remove the state folder when nothing is left in it, and the
    directory too when this run created it and left nothing there."""
    if claim.lease is not None:   # a dry run holds none
        claim.lease.release()
    run = claim.run
    storage.remove_empty_dirs([paths.join(run.state_dir, RUNS), run.state_dir],
                              run.output_dir)
    if claim.created and not storage.list_dir(run.output_dir):
        storage.remove_empty_dirs([run.output_dir], os.path.dirname(run.output_dir))


def _clear(out: str, dataset_may_stay: bool, took_over: Optional[Holder] = None,
           in_pipeline: bool = False
           ) -> tuple[list[str], tuple[tuple[str, Optional[bytes]], ...]]:
    """Remove earlier runs' leftovers (best-effort: what stays is still listed by its
    run folder); refuse a committed dataset unless `dataset_may_stay` (the run
    overwrites it or appends to it). Returns the committed
    dataset's files, which the new run deletes once it has committed, and the earlier
    runs `in_pipeline` leaves to the pipeline (a distributed run: tens of thousands of
    objects at 2 TB, commit/leftovers.py), with whether each lost its lease. The folder
    of a run that lost its lease while it may still run (`took_over`, or marked so
    before) is cleared but keeps its marker (`LOST_LEASE`), so what that run writes
    later is still its own to the next run, not foreign; once its process is gone, the
    marker goes too (inventory.past_runs)."""
    entries, runs, _, committed = take_inventory(out)
    if in_pipeline:
        _refuse_a_dataset(out, entries, dataset_may_stay)
        return sorted(committed), _left_to_the_pipeline(out, runs, took_over)
    for past in runs:
        _remove_leftovers(out, past, entries, committed)
    if took_over is not None:
        mark_lost(out, took_over.run_id, lost_marker(took_over))
    _refuse_a_dataset(out, entries, dataset_may_stay)
    return sorted(committed), ()


def _left_to_the_pipeline(out: str, runs: list[PastRun], took_over: Optional[Holder]
                          ) -> tuple[tuple[str, Optional[bytes]], ...]:
    """_clear's part in a distributed run: this machine's temp data of earlier runs
    deleted (the workers cannot reach it), and the runs whose leftovers the pipeline
    removes, with whether each lost its lease (`took_over`'s run marked so, also where
    it has no folder yet)."""
    for past in runs:
        if _temp_elsewhere(out, past):
            delete_local_temp(past.temp_dir, past.run_id)
    marker = None
    if took_over is not None:
        marker = lost_marker(took_over)
        if all(p.run_id != took_over.run_id for p in runs):
            mark_lost(out, took_over.run_id, marker)
    return tuple(
        (p.run_id, marker if took_over and p.run_id == took_over.run_id else p.lost_lease)
        for p in runs)


def _remove_leftovers(out: str, past: PastRun, entries: dict[str, storage.Entry],
                      committed: set[str]) -> None:
    """An earlier run's files (those of the committed dataset aside), its temp data and
    its folder removed, best-effort: an OSError is logged, and the next run tries
    again."""
    try:
        storage.delete_files(sorted(paths.join(out, name) for name in past.files - committed
                                    if name in entries), out)
        if _temp_elsewhere(out, past):   # else it goes with the folder
            delete_local_temp(past.temp_dir, past.run_id)
        clear_folder(out, past.run_id, past.lost_lease)
    except OSError as e:
        _LOG.warning("could not remove the leftovers of run %s in %s (%s); the next "
                     "run tries again", past.run_id, out, e)


def _temp_elsewhere(out: str, past) -> bool:
    """Whether an earlier run kept its temp data outside its run folder (on local disk)."""
    return bool(past.temp_dir) and past.temp_dir != paths.join(out, STATE_DIR, RUNS,
                                                               past.run_id, TEMP)


def _refuse_a_dataset(out: str, entries: dict, dataset_may_stay: bool) -> None:
    if data_format.DATASET_JSON in entries and not dataset_may_stay:
        raise OutputDirError(f"--output_dir: {out} already holds a dataset; pass "
                             "--overwrite to replace it, or --append to add new videos to it")


def local_temp_base(temp_location: Optional[str]) -> str:
    """Where a local run keeps temp data when the output is remote: --temp_location when
    it is a local path, else the system's temp directory."""
    if temp_location and not paths.is_remote(temp_location):
        return paths.normalize(temp_location)
    return tempfile.gettempdir()


@contextlib.contextmanager
def claimed(request: ClaimRequest) -> Iterator[Claim]:
    """`prepare`'s claim for the block. When the block raises, what the run wrote is
    abandoned (unless a distributed job may still write: `request.job`) and the lease
    released (a submitted job's only once its runner confirmed it stopped:
    lease.Lease.release); when it ends, the lease is released, unless
    `request.keep_lease`."""
    claim = prepare(request)
    try:
        yield claim
    except BaseException:
        # A run that stops leaves only what proves itself. A cancelled job's workers may
        # still write: its run folder stays, listing their files for the next run.
        if request.job is None:
            abandon(claim.run)
        release(claim)
        raise
    if not request.keep_lease:
        release(claim)
