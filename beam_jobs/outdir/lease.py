"""One run at a time in an output directory: a lease, taken by create-if-absent.

The lease is a small JSON object in the directory's state folder naming its run, host
and process. A second run finds it and is refused with a line naming the holder.

- A run on this machine's runner renews it from a heartbeat thread in the launcher
  (a failed renewal is tried again at the next beat). It is stale, and taken over,
  when its process is gone from this host (a run killed with -9) or when it was not
  renewed for `LEASE_SECONDS`.
- A job on a distributed runner needs no launcher once submitted: its lease names the
  job (`Job`: the runner, its id, where to ask), has no heartbeat and never expires; the
  pipeline releases it after its commit. A later run asks the runner (an `Ask`): a job
  the runner confirms stopped (done, failed) is taken over; a running one refuses the
  run; one it cannot ask about refuses it too, unless told to break the lease.

Taking over and renewing are compare-and-swap operations (GCS generation preconditions
on gs://), so of two runs racing for a stale lease one wins; and a run whose lease was
taken over knows it, because its next renewal fails: `finalize` checks the holder
before it commits. A lease is seen whole or not at all (swap.create_exclusive), so a
lease file that is not what this job writes is never taken for stale: it is neither
trusted nor deleted, and the run is refused with a line saying what to do.
"""
from __future__ import annotations

import dataclasses
import json
import logging
import os
import re
import socket
import threading
import time
from typing import Callable, NamedTuple, Optional

from beam_jobs.outdir import swap

LEASE_SECONDS = 120.0
HEARTBEAT_SECONDS = 20.0
_LOG = logging.getLogger("beam_jobs.outdir.lease")


BREAK_FLAG = "--break_lease"


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
        return self.host == socket.gethostname() and not _alive(self.pid)

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
        holder = _parse(json.dumps(fields).encode("utf-8"))
    except (ValueError, TypeError, KeyError, AttributeError):
        return True
    if holder.job is not None or not holder.dead():
        return True
    return type(group) is int and group > 0 and _alive(group, group=True)


LEFTOVER = re.compile(r"\.[0-9a-f]{32}\.(tmp|stale)")


def _remove_leftovers(path: str) -> None:
    """Remove the temp and aside files of writes and deletes of the lease
    (`path.<hex>.tmp`, `path.<hex>.stale`, swap.py) that a kill left: the holder of the
    lease does this. Local disk only: on GCS the lease is written in place. A racing
    run whose file goes meanwhile tries again (swap.py)."""
    folder, name = os.path.split(path)
    if not os.path.isdir(folder):
        return
    for entry in os.scandir(folder):
        if (entry.name.startswith(name) and LEFTOVER.fullmatch(entry.name[len(name):])
                and entry.is_file(follow_symlinks=False)):
            try:
                os.unlink(entry.path)
            except FileNotFoundError:
                pass


def _alive(pid: int, group: bool = False) -> bool:
    """Whether the process `pid` (with `group`, any process of the group) is there."""
    try:
        (os.killpg if group else os.kill)(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


class LeaseLost(RuntimeError):
    """This run's lease was taken over (it was paused, or stopped renewing past its
    expiry): it commits nothing, and what it wrote is left for the next run to remove."""

    def __init__(self, output_dir: str):
        super().__init__(f"another run took the lease on {output_dir} (this run was paused "
                         "or stopped renewing it): this run commits nothing; what it wrote "
                         "there the next run removes")


class LeaseHeld(Exception):
    """Another live run holds the directory's lease."""


class LeaseUnreadable(Exception):
    """The lease file is not one this job wrote (hand-edited, foreign, damaged): it is
    neither taken over nor trusted; the message names it and says what to do."""


def _parse(data: bytes) -> Holder:
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
        return _parse(data).run_id
    except ValueError:
        return None


class Lease:
    """The lease at `path` held by `run_id`, renewed in the background until released;
    or, for `job` (a job on a distributed runner), never renewed and never expiring.

    `ask`: how to ask a runner about a job that holds the lease; `break_lease`: take
    over a job's lease when its runner cannot be asked (a person says it is gone)."""

    def __init__(self, path: str, run_id: str, job: Optional[Job] = None,
                 ask: Ask = cannot_ask, break_lease: bool = False):
        self.path, self.run_id, self.job = path, run_id, job
        self._ask, self._break, self._broke = ask, break_lease, False
        self._token: Optional[str] = None
        self._started = time.time()
        self._stop = threading.Event()
        self._thread: Optional[threading.Thread] = None
        self.lost = False
        # The run whose stale lease this one took over while it may still be alive.
        self.took_over: Optional[Holder] = None
        # A submitted job's lease is the job's to release, unless its runner confirmed
        # that it stopped (the launcher sets this).
        self.job_stopped = False

    def _content(self) -> bytes:
        return Holder(self.run_id, socket.gethostname(), os.getpid(), self._started,
                      None if self.job else time.time() + LEASE_SECONDS, self.job).to_json()

    def acquire(self) -> "Lease":
        """Take the lease, or raise LeaseHeld naming the live run that has it
        (LeaseUnreadable for a lease file this job cannot read)."""
        for _ in range(5):
            self._token = swap.create_exclusive(self.path, self._content())
            if self._token is not None:
                self._taken()
                return self
            current = swap.read_with_token(self.path)
            if current is None:
                continue  # released meanwhile: try again
            data, token = current
            other = self._holder(data)
            may_write = (self._take_from_job(other, other.job) if other.job is not None
                         else self._take_from_launcher(other))
            if swap.delete_if(self.path, token) and may_write:
                self.took_over = other
        raise LeaseHeld("another run keeps taking the lease")

    def _taken(self) -> None:
        """Once the lease file is this run's: a lost run's leftovers removed, a word when
        --break_lease had nothing to break, and a launcher's lease renewed in the
        background."""
        _remove_leftovers(self.path)
        if self._break and not self._broke:
            _LOG.warning("%s: no lease of a job on a distributed runner to break on "
                         "%s; the flag had nothing to do", BREAK_FLAG,
                         os.path.dirname(os.path.dirname(self.path)))
        if self.job is None:
            self._thread = threading.Thread(target=self._heartbeat, daemon=True,
                                            name="make_shards-lease")
            self._thread.start()

    def _holder(self, data: bytes) -> Holder:
        """The holder the lease file names; LeaseUnreadable when it is none this job
        wrote."""
        try:
            return _parse(data)
        except ValueError as e:
            raise LeaseUnreadable(
                f"{self.path} is not a lease this job can read ({e}): if no run is "
                f"writing {os.path.dirname(os.path.dirname(self.path))}, delete it"
            ) from None

    def _take_from_launcher(self, other: Holder) -> bool:
        """Take a launcher's lease: LeaseHeld unless it is stale. Returns whether that
        run may still write."""
        if not other.stale(time.time()):
            raise LeaseHeld(other.describe() + (
                f" ({BREAK_FLAG} breaks only a distributed job's lease: a local run's is "
                "taken over once its process is gone or it goes unrenewed for "
                f"{LEASE_SECONDS:.0f} s)" if self._break else ""))
        _LOG.warning("taking over the stale lease of run %s", other.run_id)
        return not other.dead()

    def _take_from_job(self, other: Holder, job: Job) -> bool:
        """Take the lease of `other`, held by `job`: LeaseHeld unless its runner confirms
        it stopped (or it cannot be asked and the lease is to be broken). Returns whether
        that job may still write."""
        if job.id is None:
            if other.host == socket.gethostname() and _alive(other.pid):
                raise LeaseHeld(f"{other.describe()}, which is being submitted")
            why = "its launcher ended before it recorded the job's id"
        else:
            try:
                state = self._ask(job)
            except CannotAsk as e:
                why = f"its runner cannot be asked about it ({e})"
            else:
                if state.stopped:
                    _LOG.warning("%s is %s: taking over the lease of its run %s",
                                 job.describe(), state.name, other.run_id)
                    return False
                if not state.terminal:
                    raise LeaseHeld(f"{other.describe()}, which {job.runner} reports "
                                    f"{state.name}; wait for it to end, or cancel it")
                why = (f"{job.runner} reports it {state.name} but does not confirm that "
                       "its workers stopped")
        if not self._break:
            raise LeaseHeld(f"{other.describe()}: {why}; if that job no longer runs, pass "
                            f"{BREAK_FLAG} to take over")
        _LOG.warning("%s: breaking the lease of run %s (%s)", BREAK_FLAG, other.run_id, why)
        self._broke = True
        return True

    def record_job_id(self, job_id: Optional[str]) -> None:
        """Name the submitted job's id in the lease, so that later runs can ask its
        runner about it. A lease the job already released is left alone."""
        if self.job is None or job_id is None or self._token is None:
            return
        self.job = dataclasses.replace(self.job, id=job_id)
        token = swap.replace_if(self.path, self._content(), self._token)
        if token is None:
            self.lost = True
        else:
            self._token = token

    @property
    def token(self) -> Optional[str]:
        return self._token

    def still_held(self) -> bool:
        """Whether the lease file is still the one this run last wrote (a run paused
        past its expiry may have lost it without its heartbeat knowing yet)."""
        current = swap.read_with_token(self.path)
        return current is not None and current[1] == self._token

    def _heartbeat(self) -> None:
        while not self._stop.wait(HEARTBEAT_SECONDS):
            if self._token is None:   # never held, or given back: nothing to renew
                return
            try:
                token = swap.replace_if(self.path, self._content(), self._token)
            except Exception as e:  # a network error: the lease lasts; try at the next beat
                _LOG.warning("could not renew the lease on %s (%s); trying again in %.0f s",
                             os.path.dirname(self.path), e, HEARTBEAT_SECONDS)
                continue
            if token is None:
                self.lost = True
                _LOG.error("lost the lease on %s to another run; this run will not "
                           "commit its dataset", os.path.dirname(self.path))
                return
            self._token = token

    def release(self) -> None:
        """Give the lease back; a submitted job's stays with the job unless its runner
        confirmed that it stopped (`job_stopped`)."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        if self.job is not None and self.job.id is not None and not self.job_stopped:
            return
        if self._token is not None and not self.lost:
            # not deleted: another run has it now (this one was paused past its expiry)
            self.lost = not swap.delete_if(self.path, self._token)
        self._token = None
