"""The job's command in a process of its own, started in a fraction of a second: a fork
of a server process that has imported the job already (multiprocessing's forkserver),
instead of a new interpreter that spends seconds importing Beam. For tests where a
process is the point (a kill, a signal, an exit status, a second run beside the first)
but the imports are not; those that stop a command during its imports start
`python -m beam_jobs.make_shards` itself.

The child does what `python -m beam_jobs.make_shards` does after its imports: its own
session (as `start_new_session`, so a signal to its group reaches its workers too, as
Ctrl-C in a terminal does), the early signal handlers, then `main` and `exit_now`.
This module imports no TensorFlow, so the server that forks the children holds none.
"""
from __future__ import annotations

import multiprocessing
import os
import signal
import tempfile
import time
from typing import Callable, Optional, Sequence

_CONTEXT = multiprocessing.get_context("forkserver")
_CONTEXT.set_forkserver_preload(["job_process", "beam_jobs.make_shards"])


def _command(argv: list[str], stderr_path: str, env: dict, cwd: Optional[str],
             prepare: Optional[Callable[[], None]]) -> None:
    os.setsid()
    with open(stderr_path, "wb") as err, open(os.devnull, "wb") as null:
        os.dup2(err.fileno(), 2)
        os.dup2(null.fileno(), 1)
    os.environ.clear()
    os.environ.update(env)
    tempfile.tempdir = None   # TMPDIR as the caller set it
    if cwd is not None:
        os.chdir(cwd)
    from beam_jobs import make_shards
    from beam_jobs.job import early_signals, lifecycle

    early_signals.install()
    make_shards._STARTED = time.monotonic()   # the command's start: this fork's
    if prepare is not None:
        prepare()
    lifecycle.exit_now(make_shards.main(argv))


class JobProcess:
    """`python -m beam_jobs.make_shards ARGV`, forked: what a test needs of a Popen
    (its stderr a file to read once it has ended)."""

    def __init__(self, argv: Sequence[str], env: Optional[dict] = None,
                 cwd: Optional[str] = None, prepare: Optional[Callable[[], None]] = None):
        handle, self._stderr_path = tempfile.mkstemp(prefix="job-stderr-")
        os.close(handle)
        self._process = _CONTEXT.Process(target=_command, args=(
            [str(a) for a in argv], self._stderr_path, dict(os.environ if env is None else env),
            cwd, prepare), daemon=False)
        self._process.start()
        self.pid = self._process.pid
        self.stderr = open(self._stderr_path, errors="replace")   # as Popen's, read at the end

    @property
    def returncode(self) -> Optional[int]:
        return self._process.exitcode

    def poll(self) -> Optional[int]:
        return self._process.exitcode

    def wait(self, timeout: Optional[float] = None) -> int:
        self._process.join(timeout)
        if self._process.exitcode is None:
            raise TimeoutError(f"the job (pid {self.pid}) still runs after {timeout} s")
        if os.path.exists(self._stderr_path):
            os.unlink(self._stderr_path)   # self.stderr still reads it
        return self._process.exitcode

    def send_signal(self, signum: int) -> None:
        os.kill(self.pid, signum)

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)


class DieAtCommitStep:
    """A `prepare` that makes the command die (exit 9, no cleanup of its own) just
    before the `step`-th move of its commit: each side file's, then dataset.json's
    (storage.place), the derived TFDS file's rewrite, the cleanup after the commit."""

    def __init__(self, step: int):
        self.step = step

    def __call__(self) -> None:
        from beam_jobs import outdir
        from beam_jobs.core import storage

        calls = [0]

        def dying(function):
            def call(*args, **kwargs):
                calls[0] += 1
                if calls[0] == self.step:
                    os._exit(9)
                return function(*args, **kwargs)
            return call

        storage.place = dying(storage.place)
        outdir.write_derived = dying(outdir.write_derived)
        outdir.clean_up_after_commit = dying(outdir.clean_up_after_commit)


class StopAtCommit:
    """A `prepare` that makes the command stop itself (SIGSTOP) as its pipeline's Commit
    step starts (commit/finalize.py's `finalize`), so that a test can take its lease
    over at that moment and then continue it (SIGCONT)."""

    def __call__(self) -> None:
        from beam_jobs.commit import finalize as module

        function = module.finalize

        def stopping(*args, **kwargs):
            os.kill(os.getpid(), signal.SIGSTOP)
            return function(*args, **kwargs)

        module.finalize = stopping


class StopAfterLease:
    """A `prepare` that makes the command stop itself (SIGSTOP) as soon as it holds the
    output directory's lease, still starting (outdir/claim.py's `prepare`), so that a
    test can take its lease over at that moment and then continue it (SIGCONT)."""

    def __call__(self) -> None:
        from beam_jobs.outdir import lease

        acquire = lease.Lease.acquire

        def stopping(self):
            held = acquire(self)
            os.kill(os.getpid(), signal.SIGSTOP)
            return held

        lease.Lease.acquire = stopping
