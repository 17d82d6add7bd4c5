"""Who holds an output directory's lease, as its lease file says (lease.py): the run
and its process (`Holder`), or the job on a distributed runner that holds it (`Job`, and
how to ask its runner about it: `Ask`, `JobState`, `CannotAsk`); the file read back
strictly (`parse`), and the marker of a run whose lease was taken over.
"""
from __future__ import annotations

import dataclasses
import json
import os
import socket
import time
from typing import Callable, NamedTuple, Optional


@dataclasses.dataclass(frozen=True)
class Job:
    """A job on a distributed runner, and where to ask its runner what state it is in."""
    runner: str
    name: str
    id: Optional[str] = None         # the runner's id for it, known once it is submitted
    endpoint: Optional[str] = None   # PortableRunner: its job service
    project: Optional[str] = None    # DataflowRunner: its project and region
    region: Optional[str] = None

    def describe(self) -> str:
        where = self.endpoint or "/".join(p for p in (self.project, self.region) if p)
        return (f"job {self.id or self.name} on {self.runner or 'a distributed runner'}"
                + (f" at {where}" if where else ""))


class JobState(NamedTuple):
    """What a runner says of a job: its state's name (RUNNING, DONE, CANCELLED...), and
    whether that confirms the job writes nothing more."""
    name: str
    stopped: bool
    terminal: bool


class CannotAsk(Exception):
    """The runner cannot be asked about a job (unreachable, or it does not know the id);
    the message says why."""


Ask = Callable[[Job], JobState]   # raises CannotAsk


def cannot_ask(job: Job) -> JobState:
    raise CannotAsk("no runner to ask was given")


@dataclasses.dataclass(frozen=True)
class Holder:
    run_id: str
    host: str
    pid: int
    started: float
    expires: Optional[float]       # None: a job's lease, which never expires
    job: Optional[Job] = None      # the job on a distributed runner that holds it

    def describe(self) -> str:
        started = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(self.started))
        if self.job is not None:
            return (f"run {self.run_id} ({self.job.describe()}, submitted from {self.host} "
                    f"at {started})")
        return (f"run {self.run_id} (pid {self.pid} on {self.host}, started {started}); "
                "wait for it to finish or choose another directory")

    def stale(self, now: float) -> bool:
        """Whether a launcher's lease is stale (a job's is decided by its runner)."""
        return self.dead() or (self.expires is not None and now > self.expires)

    def dead(self) -> bool:
        """Whether its process is known to be gone (on this host), so it writes nothing
        more; a run whose lease merely expired may still be alive (paused, or on another
        host whose clock or network failed)."""
        return self.host == socket.gethostname() and not alive(self.pid)

    def to_json(self) -> bytes:
        return json.dumps(dataclasses.asdict(self)).encode("utf-8")


def lost_marker(holder: Holder) -> bytes:
    """The marker of a run whose lease was taken over while it may still write: its
    holder as its lease named it, and the process group of its process (its worker
    processes', which may outlive it by a bundle), read while that process lives."""
    group = None
    if holder.job is None and holder.host == socket.gethostname():
        try:
            group = os.getpgid(holder.pid)
        except ProcessLookupError:
            pass
    return json.dumps({**dataclasses.asdict(holder), "group": group}).encode("utf-8")


def may_still_write(marker: bytes) -> bool:
    """Whether the run a lost lease's marker (lost_marker) names may still write:
    unless its launcher's process on this host is gone and so is every process of its
    group (its workers'). A job on a distributed runner may (its launcher's end says
    nothing of its workers), and so may the run of a marker that does not name its
    process (a marker from before they did, or one that cannot be read)."""
    try:
        fields = json.loads(marker.decode("utf-8"))
        group = fields.pop("group")
        holder = parse(json.dumps(fields).encode("utf-8"))
    except (ValueError, TypeError, KeyError, AttributeError):
        return True
    if holder.job is not None or not holder.dead():
        return True
    return type(group) is int and group > 0 and alive(group, group=True)


def alive(pid: int, group: bool = False) -> bool:
    """Whether the process `pid` (with `group`, any process of the group) may still
    write: it is there, and not a zombie or exiting (`_may_run`), as a run killed with
    -9 is until its parent reaps it, or while it tears down its memory."""
    try:
        (os.killpg if group else os.kill)(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass
    if not group:
        return _may_run(pid)
    members = _group_members(pid)
    return not members or any(_may_run(member) for member in members)


_PF_EXITING = 0x4   # a task's flag in /proc/PID/stat (Linux's sched.h): it is exiting


def _may_run(pid: int) -> bool:
    """Whether a thread of the process `pid` may still run: one that /proc shows is
    not a zombie (Z), dead (X) or exiting (PF_EXITING). Where /proc cannot say (not
    Linux, a /proc that hides it), kill's word stands: it may."""
    try:
        for thread in os.listdir(f"/proc/{pid}/task"):
            fields = _stat(f"/proc/{pid}/task/{thread}/stat")
            if fields is not None and fields[0] not in "ZX" and not (
                    int(fields[6]) & _PF_EXITING):
                return True
    except OSError:
        return True
    return False


def _group_members(group: int) -> list[int]:
    """The processes of a process group, as /proc lists them (none where it cannot)."""
    try:
        return [int(entry) for entry in os.listdir("/proc") if entry.isdigit()
                and (fields := _stat(f"/proc/{entry}/stat")) is not None
                and int(fields[2]) == group]
    except OSError:
        return []


def _stat(path: str) -> Optional[list[str]]:
    """The fields of a /proc stat file after the command's name (state, ppid, pgrp,
    session, tty, tpgid, flags...); None when its process or thread is gone."""
    try:
        with open(path, "rb") as f:
            text = f.read()
    except (FileNotFoundError, ProcessLookupError):
        return None
    return text[text.rindex(b")") + 2:].decode("ascii").split()


def parse(data: bytes) -> Holder:
    """The holder a lease file names; ValueError saying what is wrong with it. Every
    field is checked here, so that deciding whether it is stale, and naming it, cannot
    fail on a hand-edited or foreign file."""
    found = _holder_fields(data)
    _check_names(found)
    _check_times(found)
    return found


def _holder_fields(data: bytes) -> Holder:
    """A lease file's JSON as a Holder, its job a Job (a lease from before jobs were
    asked names only the job); ValueError naming the fields when it is none."""
    try:
        fields = json.loads(data.decode("utf-8"))
        found = Holder(**fields)
        if isinstance(found.job, str):   # a lease from before jobs were asked: its name
            found = dataclasses.replace(found, job=Job("", found.job))
        elif found.job is not None:   # still the JSON object
            found = dataclasses.replace(found, job=Job(**fields["job"]))
    except (ValueError, TypeError):
        raise ValueError("not a JSON object with the fields "
                         f"{', '.join(f.name for f in dataclasses.fields(Holder))}") from None
    return found


def _check_names(found: Holder) -> None:
    """ValueError unless the run id, host and the job's fields are strings (or None),
    and the pid a process id."""
    job_fields = () if found.job is None else dataclasses.astuple(found.job)
    if not (isinstance(found.run_id, str) and isinstance(found.host, str)
            and all(v is None or isinstance(v, str) for v in job_fields)):
        raise ValueError("run_id, host or a field of job is not a string")
    if type(found.pid) is not int or not 0 < found.pid < 2**31:
        raise ValueError(f"pid {found.pid!r:.40} is not a process id")


def _check_times(found: Holder) -> None:
    """ValueError unless the start, and the expiry where there is one (a job's lease
    never expires), are times this machine can show."""
    times: dict[str, Optional[float]] = {"started": found.started}
    if found.job is None or found.expires is not None:
        times["expires"] = found.expires
    for name, value in times.items():
        if not _is_time(value):
            raise ValueError(f"{name} {value!r:.40} is not a time")


def _is_time(value) -> bool:
    """Seconds since the epoch that this machine can show as a date (not 1e300, NaN, a
    string or true)."""
    try:
        time.localtime(value)
    except (TypeError, ValueError, OverflowError, OSError):
        return False
    return type(value) in (int, float)


def holder_of(data: bytes) -> Optional[str]:
    """The run id of the lease file's holder (None for a lease it cannot read)."""
    try:
        return parse(data).run_id
    except ValueError:
        return None
