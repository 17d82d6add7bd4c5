"""One run at a time in an output directory: a lease, taken by create-if-absent.

The lease is a small JSON object in the directory's state folder naming its run, host
and process. A second run finds it and is refused with a line naming the holder.

- A run on this machine's runner renews it from a heartbeat thread in the launcher
  (a failed renewal is tried again at the next beat). It is stale, and taken over,
  when its process is gone from this host (a run killed with -9) or when it was not
  renewed for `LEASE_SECONDS`.
- A job on a distributed runner (Dataflow) needs no launcher once submitted: its lease
  names the job, has no heartbeat and never expires; the pipeline releases it after its
  commit. Only a person takes it over, by deleting the lease file once the job is gone.

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
from typing import Optional

from beam_jobs.outdir import swap

LEASE_SECONDS = 120.0
HEARTBEAT_SECONDS = 20.0
_LOG = logging.getLogger("beam_jobs.outdir.lease")


@dataclasses.dataclass(frozen=True)
class Holder:
    run_id: str
    host: str
    pid: int
    started: float
    expires: Optional[float]       # None: a job's lease, which never expires
    job: Optional[str] = None      # the job on a distributed runner that holds it

    def describe(self, path: str) -> str:
        started = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(self.started))
        if self.job is not None:
            return (f"run {self.run_id} (job {self.job}, submitted from {self.host} at "
                    f"{started}); if that job is no longer running (cancelled, failed), "
                    f"delete {path} to take over")
        return (f"run {self.run_id} (pid {self.pid} on {self.host}, started {started}); "
                "wait for it to finish or choose another directory")

    def stale(self, now: float) -> bool:
        if self.job is not None:
            return False
        return self.dead() or now > self.expires

    def dead(self) -> bool:
        """Whether its process is known to be gone (on this host), so it writes nothing
        more; a run whose lease merely expired may still be alive (paused, or on another
        host whose clock or network failed)."""
        return self.host == socket.gethostname() and not _alive(self.pid)


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


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
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
    try:
        fields = json.loads(data.decode("utf-8"))
        found = Holder(**fields)
    except (ValueError, TypeError):
        raise ValueError("not a JSON object with the fields "
                         f"{', '.join(f.name for f in dataclasses.fields(Holder))}") from None
    if not (isinstance(found.run_id, str) and isinstance(found.host, str)
            and (found.job is None or isinstance(found.job, str))):
        raise ValueError("run_id, host or job is not a string")
    if type(found.pid) is not int or not 0 < found.pid < 2**31:
        raise ValueError(f"pid {found.pid!r:.40} is not a process id")
    times = {"started": found.started}
    if found.job is None or found.expires is not None:
        times["expires"] = found.expires
    for name, value in times.items():
        if not _is_time(value):
            raise ValueError(f"{name} {value!r:.40} is not a time")
    return found


def _is_time(value) -> bool:
    """Seconds since the epoch that this machine can show as a date (not 1e300, NaN, a
    string or true)."""
    try:
        time.localtime(value)
    except (TypeError, ValueError, OverflowError, OSError):
        return False
    return type(value) in (int, float)


def holder(path: str) -> Optional[Holder]:
    """Who holds the lease at `path` now, if anyone (None for a lease it cannot read)."""
    current = swap.read_with_token(path)
    try:
        return None if current is None else _parse(current[0])
    except ValueError:
        return None


class Lease:
    """The lease at `path` held by `run_id`, renewed in the background until released;
    or, for `job` (a job on a distributed runner), never renewed and never expiring."""

    def __init__(self, path: str, run_id: str, job: Optional[str] = None):
        self.path, self.run_id, self.job = path, run_id, job
        self._token: Optional[str] = None
        self._started = time.time()
        self._stop = threading.Event()
        self._thread: Optional[threading.Thread] = None
        self.lost = False
        # The run whose stale lease this one took over while it may still be alive.
        self.took_over: Optional[str] = None

    def _content(self) -> bytes:
        return json.dumps(dataclasses.asdict(Holder(
            self.run_id, socket.gethostname(), os.getpid(), self._started,
            None if self.job else time.time() + LEASE_SECONDS, self.job))).encode("utf-8")

    def acquire(self) -> "Lease":
        """Take the lease, or raise LeaseHeld naming the live run that has it
        (LeaseUnreadable for a lease file this job cannot read)."""
        for _ in range(5):
            self._token = swap.create_exclusive(self.path, self._content())
            if self._token is not None:
                _remove_leftovers(self.path)
                if self.job is None:
                    self._thread = threading.Thread(target=self._heartbeat, daemon=True,
                                                    name="make_shards-lease")
                    self._thread.start()
                return self
            current = swap.read_with_token(self.path)
            if current is None:
                continue  # released meanwhile: try again
            data, token = current
            try:
                other = _parse(data)
            except ValueError as e:
                raise LeaseUnreadable(
                    f"{self.path} is not a lease this job can read ({e}): if no run is "
                    f"writing {os.path.dirname(os.path.dirname(self.path))}, delete it"
                ) from None
            if not other.stale(time.time()):
                raise LeaseHeld(other.describe(self.path))
            _LOG.warning("taking over the stale lease of run %s", other.run_id)
            if swap.delete_if(self.path, token) and not other.dead():
                self.took_over = other.run_id
        raise LeaseHeld("another run keeps taking the lease")

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
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        if self._token is not None and not self.lost:
            # not deleted: another run has it now (this one was paused past its expiry)
            self.lost = not swap.delete_if(self.path, self._token)
        self._token = None
