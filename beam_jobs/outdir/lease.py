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
import logging
import os
import re
import socket
import threading
import time
from typing import Optional

from beam_jobs.outdir import swap
from beam_jobs.outdir.holder import Ask, CannotAsk, Holder, Job, alive, cannot_ask, parse

LEASE_SECONDS = 120.0
HEARTBEAT_SECONDS = 20.0
_LOG = logging.getLogger("beam_jobs.outdir.lease")


BREAK_FLAG = "--break_lease"


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
            return parse(data)
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
            if other.host == socket.gethostname() and alive(other.pid):
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
