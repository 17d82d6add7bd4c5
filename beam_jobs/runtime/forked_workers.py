"""--all_cores's worker processes: forks of the launcher, not new interpreters.

Beam's local multi-process runner starts each worker as `python -m
apache_beam.runners.worker.sdk_worker_main`, a new interpreter that imports Beam and the
job again and tears them down at the end: seconds per worker, on a small input longer
than the work it shares (measured in docs/benchmarks.md). Here the
launcher forks one process, the zygote, once all is imported and before the runner
starts any gRPC thread, and every worker is a fork of the zygote that leaves with
`os._exit`.

The runner still starts a command per worker (`SubprocessSDKEnvironment`): this file run
as a script, the relay, which imports only the standard library. It hands its
environment (the runner's control and logging addresses among it) to the zygote over a
Unix socket, and lives as long as the worker, exiting with its status, so the runner
sees what it would see of its own subprocess.
"""
from __future__ import annotations

import contextlib
import importlib
import json
import os
import select
import shlex
import shutil
import signal
import socket
import sys
import tempfile
import threading
from typing import Iterator

_HARNESS = "apache_beam.runners.worker.sdk_worker_main"   # what Beam runs in a worker


def can_fork() -> bool:
    """Whether this process runs no thread besides its own: a fork copies only the
    calling thread, and any other's locks would stay held in the copy."""
    return threading.active_count() == 1


@contextlib.contextmanager
def environment() -> Iterator[object]:
    """A SubprocessSDKEnvironment whose workers are forks of a zygote forked now (see
    can_fork), for FnApiRunner(default_environment=...) with --direct_num_workers N and
    the running mode left in_memory (multi_processing would replace the environment).
    The zygote ends with the block, or with this process.

    Only for a process that has not run a pipeline yet (the job's launcher): gRPC keeps
    threads of its own that a fork would copy half way, and not all of them show in
    `threading`. A Python thread besides this one is refused (RuntimeError)."""
    if not can_fork():
        raise RuntimeError("forked workers need a process running no other thread")
    import logging

    from apache_beam.transforms.environments import SubprocessSDKEnvironment

    folder = tempfile.mkdtemp(prefix="make_shards-workers-")
    address = os.path.join(folder, "zygote")
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(address)
    listener.listen(64)
    gone, alive = os.pipe()   # `gone` reads EOF once this process has ended
    zygote = os.fork()
    if zygote == 0:
        os.close(alive)
        _serve(listener, gone, folder)
    os.close(gone)
    listener.close()
    runner_log = logging.getLogger("apache_beam.runners.portability.fn_api_runner.fn_runner")
    runner_log.addFilter(_not_the_running_mode_warning)
    try:
        # Run by a shell, hence exec; -I -S: the standard library alone, not this
        # file's folder (whose modules' names could shadow it) nor site-packages.
        yield SubprocessSDKEnvironment.from_command_string(" ".join(
            ["exec", *map(shlex.quote, [sys.executable, "-I", "-S",
                                         os.path.abspath(__file__), address])]))
    finally:
        runner_log.removeFilter(_not_the_running_mode_warning)
        os.close(alive)
        os.waitpid(zygote, 0)


def _not_the_running_mode_warning(record) -> bool:
    """FnApiRunner warns that N workers in_memory do not run in parallel: these do."""
    return "direct_running_mode should be" not in record.getMessage()


def _serve(listener: socket.socket, gone: int, folder: str) -> None:
    """The zygote: fork a worker for each relay that connects, until the launcher ends
    (or is killed); then remove the socket's folder."""
    status = 0
    try:
        signal.signal(signal.SIGCHLD, signal.SIG_IGN)   # its workers need no reaping
        # Ctrl-C reaches the whole process group (SIGTERM, the launcher passes on): the
        # launcher stops the run, and its workers end with it (their connection to it
        # closes), as quietly as it does.
        for signum in (signal.SIGINT, signal.SIGTERM):
            signal.signal(signum, signal.SIG_IGN)
        harness = None
        while True:
            ready, _, _ = select.select([listener.fileno(), gone], [], [])
            if gone in ready:
                break
            connection, _ = listener.accept()
            # imported here, once, not in every worker (nor if none is asked for)
            harness = harness or importlib.import_module(_HARNESS)
            if os.fork() == 0:
                listener.close()
                os.close(gone)
                _work(connection, harness)
            connection.close()
    except BaseException:   # nothing may escape a fork into the launcher's code
        status = 1
    shutil.rmtree(folder, ignore_errors=True)
    os._exit(status)


def _work(connection: socket.socket, harness) -> None:
    """A worker: the relay's environment, then Beam's SDK harness as a new interpreter
    would run it; its status goes back to the relay."""
    status = 1
    try:
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)
        environ = json.loads(_read_all(connection))
        os.environ.clear()
        os.environ.update(environ)
        import logging

        logging.getLogger().handlers.clear()   # its records go to the runner, as Beam's do
        harness.main([])
        status = 0
    finally:
        try:
            connection.sendall(bytes([status]))
        finally:
            os._exit(status)


def _read_all(connection: socket.socket) -> bytes:
    parts = []
    while part := connection.recv(1 << 16):
        parts.append(part)
    return b"".join(parts)


def _relay(address: str) -> int:
    """The command the runner starts per worker: hand this environment to the zygote,
    wait for the worker's status, and exit with it (1 if it ended without one)."""
    for signum in (signal.SIGINT, signal.SIGTERM):   # this ends with its worker
        signal.signal(signum, signal.SIG_IGN)
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as connection:
        connection.connect(address)
        connection.sendall(json.dumps(dict(os.environ)).encode("utf-8"))
        connection.shutdown(socket.SHUT_WR)
        status = connection.recv(1)
    return status[0] if status else 1


if __name__ == "__main__":
    sys.exit(_relay(sys.argv[1]))
