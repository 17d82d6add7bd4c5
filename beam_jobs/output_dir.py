"""The output directory: what a run may write there, and what it may delete.

The job deletes only files it can prove it wrote. The proof is on disk:

    OUT/dataset.json                 the committed dataset; it lists its files and run id
    OUT/_make_shards/lease.json      the lease of the run writing now (beam_jobs.lease)
    OUT/_make_shards/runs/RUN/       one folder per run, written before any data:
        run.json                     run id, where its temp data lives, its side files, and
                                     the files of the dataset it replaces; deleted last
        shards.json                  the shard files it will write (before it writes them)
        failures.jsonl ...           the sidecars of a run that did not commit
        tmp/                         its temp data (unless on local disk elsewhere)

A file is the job's when dataset.json or a run's lists name it; anything else in the
directory (a file named like a shard included, and every symbolic link) is foreign, and
a directory holding foreign files is refused, never cleared. A run's shards carry its
id in their names, so it never writes over the dataset it replaces: that dataset stays
whole until the run commits (writes dataset.json), and only then are its files deleted.
Nothing deletes a file the committed dataset.json lists. Before a run starts, the
leftovers of earlier runs are removed (best-effort): files they listed that the
committed dataset does not, their temp data and their folders.
"""
from __future__ import annotations

import dataclasses
import json
import logging
import os
import tempfile
import uuid
from typing import Iterable, NamedTuple, Optional

from beam_jobs import lease, paths, storage, swap
from readers import format as data_format

STATE_DIR = "_make_shards"
RUNS = "runs"
LEASE_FILE = "lease.json"
RUN_JSON = "run.json"
SHARDS_JSON = "shards.json"
TEMP = "tmp"
_TEMP_MARKER = "make_shards_run.json"
_LOG = logging.getLogger("beam_jobs.output_dir")


class OutputDirError(ValueError):
    """The directory cannot take this run; the message says why, in one line."""


@dataclasses.dataclass(frozen=True)
class RunDir:
    """Where one run writes: picklable, handed to the pipeline's steps."""
    output_dir: str
    run_id: str
    temp_dir: str      # the run's temp data: under its run folder, or a local directory
    # The lease's token when the pipeline itself releases the lease (a distributed
    # runner: the launcher may be gone by then); None when the launcher does.
    lease_token: Optional[str] = None

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

    def record_shards(self, names: Iterable[str]) -> None:
        """List the shard files this run is about to write (so a rerun may clear them)."""
        storage.write_bytes(paths.join(self.run_path, SHARDS_JSON),
                            json.dumps(sorted(names)).encode("utf-8"))

    def delete_temp(self) -> None:
        if paths.is_inside(self.temp_dir, self.run_path):
            storage.delete_tree(self.temp_dir, self.output_dir)
        else:
            _delete_local_temp(self.temp_dir, self.run_id)

    def delete_run_folder(self) -> None:
        if not paths.is_inside(self.temp_dir, self.run_path):
            _delete_local_temp(self.temp_dir, self.run_id)
        storage.delete_tree(self.run_path, self.output_dir, last=RUN_JSON)

    def holds_lease(self) -> bool:
        holder = lease.holder(self.lease_path)
        return holder is not None and holder.run_id == self.run_id

    def committed(self) -> bool:
        """Whether the directory's dataset.json names this run."""
        return _committed(self.output_dir, storage.list_dir(self.output_dir))[0] == self.run_id

    def clean_up_after_commit(self) -> None:
        """Delete the files of the dataset this run replaced (those its dataset.json does
        not list), its temp data, then its folder, run.json last. Best-effort: a failure
        is a warning, and the next run in the directory finishes the job."""
        try:
            out = self.output_dir
            entries = storage.list_dir(out)
            _, committed = _committed(out, entries)
            run_json = _read_json(self.in_run_folder(RUN_JSON)) or {}
            replaced = _job_files(run_json.get("replaces", [])) - committed
            storage.delete_files(sorted(self.output(n) for n in replaced if n in entries), out)
            self.delete_run_folder()
        except Exception as e:  # the dataset is committed: nothing here may undo it
            _LOG.warning("the dataset in %s is committed, but cleaning up after it failed "
                         "(%s); the next run there finishes the cleanup", self.output_dir,
                         str(e).splitlines()[0] if str(e) else type(e).__name__)

    def release_lease(self) -> None:
        """Release the lease from inside the pipeline (when `lease_token` is set)."""
        if self.lease_token is not None:
            swap.delete_if(self.lease_path, self.lease_token)


def _delete_local_temp(temp_dir, run_id: str) -> None:
    """A local temp directory outside the output directory, if it is provably this run's:
    a local absolute path named `make_shards-RUN` holding the marker that names RUN. A
    run.json naming anything else (hand-edited, or a folder that was moved) is left as it
    is, with a warning."""
    if not (isinstance(temp_dir, str) and not paths.has_scheme(temp_dir)
            and os.path.isabs(temp_dir) and os.path.normpath(temp_dir) == temp_dir
            and os.path.basename(temp_dir) == f"make_shards-{run_id}"):
        _LOG.warning("the run.json of run %s names a temp directory that is not its own "
                     "(%.200r); left as it is", run_id, temp_dir)
        return
    marker = os.path.join(temp_dir, _TEMP_MARKER)
    try:
        with open(marker) as f:
            if json.load(f).get("run_id") != run_id:
                return
    except (OSError, ValueError):
        return
    if not os.path.islink(temp_dir):
        storage.delete_tree(temp_dir, os.path.dirname(temp_dir))


@dataclasses.dataclass
class _PastRun:
    run_id: str
    temp_dir: Optional[str]
    files: set[str]


def _read_json(path: str):
    try:
        return json.loads(storage.read_bytes(path).decode("utf-8"))
    except (OSError, ValueError, UnicodeDecodeError):
        return None


def _past_runs(out: str, foreign: list[str]) -> list[_PastRun]:
    """The run folders in OUT/_make_shards/runs; anything unexpected goes to `foreign`."""
    state = paths.join(out, STATE_DIR)
    runs_dir = paths.join(state, RUNS)
    for name, entry in storage.list_dir(state).items():
        if not ((name == RUNS and entry.kind == "dir") or
                (name.startswith(LEASE_FILE) and entry.kind == "file")):
            foreign.append(f"{STATE_DIR}/{name}")
    runs = []
    for name, entry in storage.list_dir(runs_dir).items():
        # A folder named as a run id is a run's, with or without its run.json (a cleanup
        # that stopped half-way deletes run.json last, so what it lists is gone then).
        if entry.kind != "dir" or not data_format.RUN_ID.match(name):
            foreign.append(f"{STATE_DIR}/{RUNS}/{name}")
            continue
        run_json = _read_json(paths.join(runs_dir, name, RUN_JSON))
        if not (isinstance(run_json, dict) and run_json.get("run_id") == name):
            run_json = {}
        runs.append(_PastRun(name, run_json.get("temp_dir"), _job_files(
            _read_json(paths.join(runs_dir, name, SHARDS_JSON))) | _job_files(
            run_json.get("sidecars")) | _job_files(run_json.get("replaces"))))
    return runs


def _job_files(names) -> set[str]:
    """The names in a list that can be the job's files: shard names and sidecars, never
    a path (a hand-edited list must not reach outside the directory)."""
    if not isinstance(names, list):
        return set()
    return {n for n in names if isinstance(n, str) and data_format.is_dataset_file(n)}


def _committed(out: str, entries: dict) -> tuple[Optional[str], set[str]]:
    """(run id, files) of the committed dataset in `out`, if any. OutputDirError, naming
    the file and what to do, when its dataset.json does not say these in a way this job
    can read: it then cannot tell its own files from foreign ones, and touches none."""
    if data_format.DATASET_JSON not in entries:
        return None, set()
    path = paths.join(out, data_format.DATASET_JSON)
    try:
        spec = data_format.DatasetSpec.from_json(storage.read_bytes(path), source=path)
    except data_format.SpecError as e:  # not JSON, not UTF-8, or not what the job writes
        raise OutputDirError(
            f"--output_dir: {path} is not a {data_format.DATASET_JSON} this job can read "
            f"({str(e).removeprefix(f'{path}: ')}): remove it or choose another --output_dir"
        ) from None
    shards = [name for split in spec.splits.values() for shard in split.shards
              for name in (shard.file, shard.index) if name]
    # A dataset.json written before datasets listed their files names its shards.
    return spec.run_id, set(spec.files) or {*shards, *data_format.SIDECARS}


def check_inputs(out: str, input_files: Iterable[str], patterns: Iterable[str]) -> None:
    """Refuse an output directory that holds an input file or that an input glob covers."""
    for path in input_files:
        if paths.is_inside(paths.normalize(path), out):
            raise OutputDirError(f"--output_dir: {out} holds the input file {path}; "
                                 "write the dataset somewhere else")
    probes = [paths.join(out, n) for n in (data_format.DATASET_JSON, data_format.FAILURES_JSONL,
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
    lease: lease.Lease
    created: bool          # the directory did not exist before
    base: Optional[data_format.DatasetSpec] = None   # --append: the dataset it adds to


def prepare(out: str, overwrite: bool, input_files: Iterable[str] = (),
            patterns: Iterable[str] = (), local_temp: Optional[str] = None,
            job: Optional[str] = None, append: bool = False) -> Claim:
    """Take the directory for a new run: its lease, cleared leftovers, a run folder.
    A committed dataset stays as it is: the run replaces it when it commits (with
    `overwrite`), or adds a generation to it (with `append`; `Claim.base` is its spec,
    read once the lease is held, so that no other run commits under it).

    `out` is normalized (paths.normalize). `local_temp`: a local directory under which
    the run keeps its temp data, when it must not go into `out` (a local run writing to
    gs://). `job`: the name of the job on a distributed runner; the lease then names it,
    never expires, and the pipeline releases it (RunDir.lease_token). Raises
    OutputDirError with a one-line reason. A directory holding foreign files is refused
    before anything is written to it.
    """
    if not storage.supported(out):
        raise OutputDirError(f"--output_dir: {out}: only local paths and gs:// are supported")
    found = storage.kind(out)
    if found not in ("missing", "dir"):
        raise OutputDirError(f"--output_dir: {out} is a {'file' if found == 'file' else found}"
                             ", not a directory")
    check_inputs(out, input_files, patterns)
    _inventory(out)
    storage.make_dirs(out)
    created = found == "missing"
    run_id = uuid.uuid4().hex[:12]
    run = RunDir(out, run_id, "")
    try:
        held = lease.Lease(run.lease_path, run_id, job).acquire()
    except lease.LeaseHeld as e:
        raise OutputDirError(f"--output_dir: {out} is being written by {e}") from None
    except lease.LeaseUnreadable as e:
        raise OutputDirError(f"--output_dir: {e}") from None
    if job is not None:
        run = dataclasses.replace(run, lease_token=held.token)
    base = None
    try:
        replaces = _clear(out, overwrite or append)
        if append and replaces:   # a committed dataset: the one to add to
            base = _base_spec(out)
        temp = paths.join(run.run_path, TEMP)
        if local_temp is not None:
            temp = os.path.join(local_temp, f"make_shards-{run_id}")
            os.makedirs(temp)
            with open(os.path.join(temp, _TEMP_MARKER), "w") as f:
                json.dump({"run_id": run_id, "output_dir": out}, f)
        run = dataclasses.replace(run, temp_dir=temp)
        storage.write_bytes(paths.join(run.run_path, RUN_JSON), json.dumps(
            {"run_id": run_id, "temp_dir": temp,
             "sidecars": [*data_format.SIDECARS, *data_format.TFDS_FILES],
             "replaces": replaces}).encode("utf-8"))
    except BaseException:
        release(Claim(run, held, created))
        raise
    return Claim(run, held, created, base)


def _base_spec(out: str) -> data_format.DatasetSpec:
    path = paths.join(out, data_format.DATASET_JSON)
    return data_format.DatasetSpec.from_json(storage.read_bytes(path), source=path)


def abandon(run: RunDir) -> None:
    """Clear what a run that stopped half-way wrote: its listed shards and temp data,
    and its folder unless it holds the run's failures.jsonl. A run that committed is
    only cleaned up after: nothing its dataset.json lists is touched. Best-effort: what
    is left, the next run removes."""
    try:
        if run.committed():
            run.clean_up_after_commit()
            return
        listed = _job_files(_read_json(run.in_run_folder(SHARDS_JSON)))
        storage.delete_files(sorted(run.output(name) for name in listed), run.output_dir)
        if storage.kind(run.in_run_folder(data_format.FAILURES_JSONL)) == "file":
            run.delete_temp()
        else:
            run.delete_run_folder()
    except Exception as e:
        _LOG.warning("could not remove what the run left in %s (%s); the next run there "
                     "removes it", run.output_dir, e)


def release(claim: Claim) -> None:
    """Give the lease back; remove the state folder when nothing is left in it, and the
    directory too when this run created it and left nothing there."""
    claim.lease.release()
    run = claim.run
    storage.remove_empty_dirs([paths.join(run.state_dir, RUNS), run.state_dir],
                              run.output_dir)
    if claim.created and not storage.list_dir(run.output_dir):
        storage.remove_empty_dirs([run.output_dir], os.path.dirname(run.output_dir))


class _Inventory(NamedTuple):
    entries: dict
    runs: list
    committed_run: Optional[str]
    committed: set


def _inventory(out: str) -> _Inventory:
    """What lies in `out`, by whose it is; OutputDirError when anything is foreign."""
    entries = storage.list_dir(out)
    foreign: list[str] = []
    state = entries.get(STATE_DIR)
    runs = _past_runs(out, foreign) if state is not None and state.kind == "dir" else []
    committed_run, committed = _committed(out, entries)
    ours = committed | {data_format.DATASET_JSON, STATE_DIR}.union(*(r.files for r in runs))
    for name, entry in sorted(entries.items()):
        expected_kind = "dir" if name == STATE_DIR else "file"
        if name not in ours or entry.kind != expected_kind:
            foreign.append(name)
    if foreign:
        shown = ", ".join(foreign[:3]) + (", ..." if len(foreign) > 3 else "")
        raise OutputDirError(f"--output_dir: {out} holds files this job did not write "
                             f"({shown}); choose an empty or new directory")
    return _Inventory(entries, runs, committed_run, committed)


def _clear(out: str, overwrite: bool) -> list[str]:
    """Remove earlier runs' leftovers (best-effort: what stays is still listed by its
    run folder); refuse a committed dataset without `overwrite`. Returns the committed
    dataset's files, which the new run deletes once it has committed."""
    entries, runs, _, committed = _inventory(out)
    for past in runs:
        try:
            storage.delete_files(sorted(paths.join(out, name) for name in past.files - committed
                                        if name in entries), out)
            folder = paths.join(out, STATE_DIR, RUNS, past.run_id)
            if past.temp_dir and past.temp_dir != paths.join(folder, TEMP):
                _delete_local_temp(past.temp_dir, past.run_id)   # else it goes with folder
            storage.delete_tree(folder, out, last=RUN_JSON)
        except OSError as e:
            _LOG.warning("could not remove the leftovers of run %s in %s (%s); the next "
                         "run tries again", past.run_id, out, e)
    if data_format.DATASET_JSON in entries and not overwrite:
        raise OutputDirError(f"--output_dir: {out} already holds a dataset; pass "
                             "--overwrite to replace it, or --append to add new videos to it")
    return sorted(committed)


def local_temp_base(temp_location: Optional[str]) -> str:
    """Where a local run keeps temp data when the output is remote: --temp_location when
    it is a local path, else the system's temp directory."""
    if temp_location and not paths.has_scheme(temp_location):
        return paths.normalize(temp_location)
    return tempfile.gettempdir()
