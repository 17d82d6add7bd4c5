"""A run's hold on its output directory, seen from the command: the claim as a context
manager whose every way out says in one line what the directory holds, Ctrl-C, and the
worker processes of --all_cores."""
from __future__ import annotations

import atexit
import contextlib
import logging
import os
import signal
import sys
import tempfile
import threading
from typing import Iterator, Optional

from beam_jobs import outdir
from beam_jobs.core import paths
from beam_jobs.core.run_dir import RunDir
from beam_jobs.job import job_states
from beam_jobs.job.errors import Failed, Refused, beam_error_to_debug, one_line, os_error_line
from beam_jobs.job.launch import Launch
from beam_jobs.runtime import forked_workers
from beam_jobs.shuffle.place import CannotPlace

# Set by Ctrl-C (`_interrupt`, the command's SIGINT handler): Beam re-raises a KeyboardInterrupt
# that reaches a DoFn as a RuntimeError, so an interrupt is known by this, not by the
# exception.
INTERRUPTED = threading.Event()
JOB_SERVICE = "apache_beam.runners.portability.local_job_service"
INTERRUPTED_STATUS = 130   # the exit status a shell reports for Ctrl-C
SIGNALS = (signal.SIGINT, signal.SIGTERM)   # both stop a run the same way
# Where Beam logs a failed step's error: a DoFn's, an SDK worker's, a worker process's
# (through the job service), a portable job's (its messages, through the root logger).
BEAM_ERROR_LOGGERS = ("apache_beam.runners.common", "apache_beam.runners.worker.sdk_worker",
                      JOB_SERVICE, "apache_beam.runners.portability.portable_runner", "")


def quiet_logging() -> None:
    """The command's logging: the job's own lines and Beam's warnings; Beam's log of a
    failed step's traceback at debug level (errors.beam_error_to_debug), where the run
    ends in one line; nothing of a question to Dataflow's client, whose answer or
    deadline is the line (job_states.asking_quietly)."""
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    logging.getLogger("beam_jobs").setLevel(logging.INFO)
    # Worker processes' warnings come back through the local job service, among them a
    # protobuf dump per worker about a directory Beam looks for; their errors still show.
    logging.getLogger(JOB_SERVICE).setLevel(logging.ERROR)
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")  # worker processes inherit it
    for name in BEAM_ERROR_LOGGERS:
        logging.getLogger(name).addFilter(beam_error_to_debug)
    for handler in logging.getLogger().handlers:   # whatever logger a client logs to
        handler.addFilter(job_states.asking_quietly)


def exit_now(status: int) -> None:
    """Exit without the interpreter's teardown, which frees the thousands of modules Beam
    imports one by one (about a second: docs/benchmarks.md). Every file the job wrote is
    closed by now, and the atexit handlers (logging's flush, temp directories'
    finalizers) still run: `_run_exitfuncs` is what CPython itself calls at exit. An
    interrupted run must end so too: its bundle's state-sampler thread (Beam's, not a
    daemon) never stops, and the interpreter would wait for it at exit forever."""
    logging.shutdown()
    atexit._run_exitfuncs()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(status)


def _interrupt(signum, frame) -> None:
    """Ctrl-C (or SIGTERM): stop the run. Beam logs the interrupt as an error with its traceback
    where a DoFn was running; the one line that matters is main's."""
    INTERRUPTED.set()
    for name in ("apache_beam", JOB_SERVICE):
        logging.getLogger(name).setLevel(logging.CRITICAL)
    threading.excepthook = _quiet   # a runner's threads fail as their workers stop
    if signum == signal.SIGTERM:
        _stop_workers()
    raise KeyboardInterrupt


def _quiet(args) -> None:
    """After an interrupt, the one line that matters is main's."""


def _stop_workers() -> None:
    """SIGTERM reaches this process alone, where Ctrl-C reaches its whole process group:
    pass it on to the worker processes (Beam's end on it; forked ones ignore it and end
    with their connection, as on Ctrl-C), which the runner would otherwise wait for."""
    import psutil

    for child in psutil.Process().children(recursive=True):
        try:
            child.send_signal(signal.SIGTERM)
        except psutil.Error:
            pass


# The run that claimed the output directory last in this process, for what an
# interrupt outside the claim says (`held`).
_CLAIMED: list[RunDir] = []


@contextlib.contextmanager
def interrupts() -> Iterator[None]:
    """Ctrl-C and SIGTERM handled as the command handles them, for the block:
    `_interrupt`, then the handlers before it again."""
    INTERRUPTED.clear()
    _CLAIMED.clear()
    before = {signum: signal.signal(signum, _interrupt) for signum in SIGNALS}
    try:
        yield
    finally:
        for signum, handler in before.items():
            signal.signal(signum, handler)


@contextlib.contextmanager
def claimed(launch: Launch) -> Iterator[outdir.Claim]:
    """The output directory claimed for the block (outdir.claimed). A directory that
    cannot take the run is `Refused`; a machine's error (a full disk) is `Failed`; an
    interrupt is a KeyboardInterrupt; each says what the directory holds now, found
    once what the run wrote is abandoned (so a commit still in flight finds nothing to
    move, and the line is true when it is printed)."""
    io, out = launch.config.io, launch.config.io.output_dir
    held: Optional[outdir.Claim] = None
    try:
        with outdir.claimed(outdir.ClaimRequest(
                out, overwrite=io.overwrite, append=io.append,
                input_files=tuple(p for p, _ in launch.config.inputs.files),
                patterns=tuple(io.input), local_temp=launch.local_temp(), job=launch.job,
                ask=launch.ask(), break_lease=io.break_lease,
                keep_lease=io.detach)) as claim:
            held = claim
            _CLAIMED[:] = [claim.run]
            if claim.base is not None:   # --append: may this run add to that dataset?
                launch.check_append(claim.base)
            yield claim
    except outdir.OutputDirError as e:
        raise Refused(str(e)) from None
    except BaseException as e:
        if held is None:   # the claim itself, before the run
            if isinstance(e, OSError) and (error := os_error_line(e, out)) is not None:
                raise Failed(f"{error}; nothing was committed") from None
            raise
        ending = _ending_error(e, held)
        if ending is None:
            raise
        raise ending from None


def directory_state() -> str:
    """What the output directory holds, said after an interrupt: nothing committed
    before a claim, else whether the last run that claimed it committed."""
    if not _CLAIMED:
        return "nothing was committed"
    run = _CLAIMED[0]
    if outdir.committed(run):
        return f"{run.output_dir} holds the dataset this run committed"
    return f"nothing was committed; {run.output_dir} holds what it held before"


def _ending_error(error: BaseException, claim: outdir.Claim) -> Optional[BaseException]:
    """What a run that stopped with `error` ends with: an interrupt, a machine's error or
    windows that could not be placed (--shuffle place), saying what the directory holds;
    or the lost lease (whatever failed then: the run
    that took it over cleared this one's files); None to raise `error` as it is (a
    refusal, a failure that said its line already, or a bug, which keeps its
    traceback)."""
    run = claim.run
    if isinstance(error, KeyboardInterrupt) or INTERRUPTED.is_set():
        return _interrupt_error(error)
    if (claim.lease is not None and claim.lease.lost) or one_line(error, outdir.LeaseLost):
        return Failed(str(outdir.LeaseLost(run.output_dir)))
    if (unplaced := one_line(error, CannotPlace)) is not None:
        return Failed(f"{unplaced}; {directory_state()}")
    reason = os_error_line(error, run.output_dir)
    if reason is None or isinstance(error, (Refused, Failed)):
        return None
    return Failed(f"{reason}; {directory_state()}")


def _interrupt_error(error: BaseException) -> KeyboardInterrupt:
    """What an interrupted run ends with: the interrupt's own line, when it has one (a
    job not known to stop), else what the directory holds."""
    return KeyboardInterrupt(str(error) if isinstance(error, KeyboardInterrupt) and
                             error.args else directory_state())


@contextlib.contextmanager
def beam_temp_in(run: RunDir) -> Iterator[None]:
    """Beam's Pipeline makes a folder in the system's temp directory when it is built
    and removes it when it ends: for the block, that folder goes into the run's own
    local temp data instead, which the next run removes if this one is killed."""
    if not run.temp_dir or paths.is_remote(run.temp_dir):
        yield
        return
    os.makedirs(run.temp_dir, exist_ok=True)
    with _system_temp(run.temp_dir):
        yield


@contextlib.contextmanager
def submission_temp(launch: Launch) -> Iterator[None]:
    """Beam's stager writes what a submission to a distributed runner needs into folders
    of the system's temp directory that it never removes (a `tmpXXXXXXXX` holding
    submission_environment_dependencies.txt each time, an empty beam-requirements-cache;
    the job's own staged requirements.txt): for the block, the submission, they go into
    a folder of the job's own, removed once the job is submitted. A dry run's result
    still names its files: it keeps them."""
    if launch.local or launch.dry_run:
        yield
        return
    with tempfile.TemporaryDirectory(prefix="make_shards-submission-",
                                     ignore_cleanup_errors=True) as folder, \
            _system_temp(folder):
        yield


@contextlib.contextmanager
def _system_temp(folder: str) -> Iterator[None]:
    """`folder` as the system's temp directory (tempfile's) for the block."""
    before, tempfile.tempdir = tempfile.tempdir, folder
    try:
        yield
    finally:
        tempfile.tempdir = before


def workers(launch: Launch, fork: bool):
    """The environment of --all_cores's worker processes when they are forks of this
    process (forked before the lease's thread starts: a fork copies only the calling
    thread), as a context manager; else a null one. `fork`: the caller is a process that
    has not run a pipeline (the command)."""
    if fork and launch.can_fork_workers():
        return forked_workers.environment()
    return contextlib.nullcontext()
