"""What lies in an output directory, and whose it is: the committed dataset's files,
the files earlier runs listed in their folders, and anything else, which is foreign.

A file is the job's when dataset.json or a run's lists name it, or when its name carries
the id of a run whose folder is there (a run that lost its lease may still write a shard
after the next run cleared its folder: that folder keeps a marker, core/run_dir.py);
anything else in the directory (a file named like a shard included, and every symbolic
link) is foreign, and a directory holding foreign files is refused, never cleared.
"""
from __future__ import annotations

import dataclasses
import json
from typing import NamedTuple, Optional

from beam_jobs.core import paths, storage
from beam_jobs.core.run_dir import LEASE_FILE, LOST_LEASE, RUN_JSON, RUNS, SHARDS_JSON, STATE_DIR
from beam_jobs.outdir.holder import may_still_write
from readers import format as data_format


class OutputDirError(ValueError):
    """The directory cannot take this run; the message says why, in one line."""


@dataclasses.dataclass
class PastRun:
    """A run folder found in the directory: its run, temp data, the files it named (and,
    once the inventory is taken, those named with its id), whether it lost its lease."""
    run_id: str
    temp_dir: Optional[str]
    files: set[str]
    # Its lost lease's marker, while the run it names may still write (`_lost_lease`).
    lost_lease: Optional[bytes] = None


class Inventory(NamedTuple):
    entries: dict              # name -> storage.Entry, of the directory's top level
    runs: list[PastRun]
    committed_run: Optional[str]
    committed: set[str]        # the committed dataset's files


def read_json(path: str):
    """A small JSON file's value, or None when it is missing or not JSON."""
    try:
        return json.loads(storage.read_bytes(path).decode("utf-8"))
    except (OSError, ValueError, UnicodeDecodeError):
        return None


def past_runs(out: str, foreign: list[str]) -> list[PastRun]:
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
        runs.append(_past_run(runs_dir, name))
    return runs


def _past_run(runs_dir: str, name: str) -> PastRun:
    """The run of folder `name`: its temp dir and files, from its run.json (unless it
    names another run) and shards.json, and its lost lease's marker."""
    run_json = read_json(paths.join(runs_dir, name, RUN_JSON))
    if not (isinstance(run_json, dict) and run_json.get("run_id") == name):
        run_json = {}
    lost = _lost_lease(paths.join(runs_dir, name, LOST_LEASE))
    return PastRun(name, run_json.get("temp_dir"), job_files(
        read_json(paths.join(runs_dir, name, SHARDS_JSON))) | job_files(
        run_json.get("sidecars")) | job_files(run_json.get("replaces")), lost)


def _lost_lease(marker: str) -> Optional[bytes]:
    """A lost lease's marker, unless there is none or the run it names can no longer
    write (its process on this host is gone): a marker that would stay forever."""
    try:
        data = storage.read_bytes(marker)
    except FileNotFoundError:
        return None
    except OSError:   # not a file, unreadable: kept, as one that names no process
        return b"{}"
    return data if may_still_write(data) else None


def job_files(names) -> set[str]:
    """The names in a list that can be the job's files: shard names and sidecars, never
    a path (a hand-edited list must not reach outside the directory)."""
    if not isinstance(names, list):
        return set()
    return {n for n in names if isinstance(n, str) and data_format.is_dataset_file(n)}


def committed_dataset(out: str, entries: dict) -> tuple[Optional[str], set[str]]:
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


def take_inventory(out: str) -> Inventory:
    """What lies in `out`, by whose it is; OutputDirError when anything is foreign."""
    entries = storage.list_dir(out)
    foreign: list[str] = []
    state = entries.get(STATE_DIR)
    runs = past_runs(out, foreign) if state is not None and state.kind == "dir" else []
    committed_run, committed = committed_dataset(out, entries)
    _add_run_files(entries, runs)
    ours = committed | {data_format.DATASET_JSON, STATE_DIR}.union(*(r.files for r in runs))
    foreign += _not_ours(entries, ours)
    if foreign:
        shown = ", ".join(foreign[:3]) + (", ..." if len(foreign) > 3 else "")
        raise OutputDirError(f"--output_dir: {out} holds files this job did not write "
                             f"({shown}); choose an empty or new directory")
    return Inventory(entries, runs, committed_run, committed)


def _add_run_files(entries: dict[str, storage.Entry], runs: list[PastRun]) -> None:
    """Adds each entry named with the id of one of `runs` to that run's files."""
    by_id = {run.run_id: run for run in runs}
    for name in entries:
        run_id = data_format.run_id_in(name)
        run = by_id.get(run_id) if run_id is not None else None
        if run is not None:
            run.files.add(name)


def _not_ours(entries: dict[str, storage.Entry], ours: set[str]) -> list[str]:
    """The entries, in name order, that are none of `ours`, or of another kind than
    ours are (the state folder a folder, every other one a file)."""
    foreign = []
    for name, entry in sorted(entries.items()):
        expected_kind = "dir" if name == STATE_DIR else "file"
        if name not in ours or entry.kind != expected_kind:
            foreign.append(name)
    return foreign
