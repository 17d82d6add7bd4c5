"""Beam's portable machinery on this machine, for tests of a distributed run: the local
job service and an external worker pool, each its own process on a free port, as a user
would start them (docs/dataflow.md, "A distributed run on one machine").

The worker pool starts each SDK worker as `python` from its PATH (Beam 2.77's
worker_pool_main), with its environment: `env` decides what a worker can import (tests
give it a PYTHONPATH whose `av` cannot be imported), and a `python` that is this
interpreter comes first on the PATH, whatever the machine calls its Python. Both
processes always end with the block, pass or fail."""
from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
from typing import Iterator, Optional

SERVICE = "apache_beam.runners.portability.local_job_service_main"
POOL = "apache_beam.runners.worker.worker_pool_main"


def options(job_endpoint: str, worker_endpoint: str) -> list[str]:
    """The pipeline options of a run on a job service and a worker pool."""
    return ["--runner", "PortableRunner", "--job_endpoint", job_endpoint,
            "--environment_type", "EXTERNAL", "--environment_config", worker_endpoint]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("localhost", 0))
        return s.getsockname()[1]


def _wait_for_port(port: int, process: subprocess.Popen, what: str, log: str) -> None:
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"{what} ended with {process.returncode}: {_tail(log)}")
        with socket.socket() as s:
            if s.connect_ex(("localhost", port)) == 0:
                return
        time.sleep(0.1)
    raise RuntimeError(f"{what} did not listen on {port} in 60 s: {_tail(log)}")


def _tail(log: str) -> str:
    with open(log, errors="replace") as f:
        return f.read()[-2000:]


def _start(args: list[str], env: dict, log: str) -> subprocess.Popen:
    with open(log, "ab") as f:
        return subprocess.Popen([sys.executable, "-m", *args], env=env, stdout=f, stderr=f,
                                stdin=subprocess.DEVNULL, start_new_session=True)


def _stop(process: Optional[subprocess.Popen]) -> None:
    """End the process and everything it started (its SDK workers)."""
    if process is None or process.poll() is not None:
        return
    for sig, wait in ((signal.SIGTERM, 10), (signal.SIGKILL, 10)):
        try:
            os.killpg(process.pid, sig)
        except ProcessLookupError:
            return
        try:
            process.wait(wait)
            return
        except subprocess.TimeoutExpired:
            continue


@contextlib.contextmanager
def job_service(workdir: str) -> Iterator[str]:
    """A local job service logging to `workdir`; its endpoint."""
    os.makedirs(workdir, exist_ok=True)
    process = None
    try:
        port_file = os.path.join(workdir, "job_service.port")
        log = os.path.join(workdir, "job_service.log")
        process = _start([SERVICE, "--port", "0", "--port_file", port_file], dict(os.environ),
                         log)
        deadline = time.monotonic() + 60
        while not (os.path.exists(port_file) and open(port_file).read().strip()):
            if process.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"the job service did not start: {_tail(log)}")
            time.sleep(0.1)
        port = int(open(port_file).read())
        _wait_for_port(port, process, "the job service", log)
        yield f"localhost:{port}"
    finally:
        _stop(process)


@contextlib.contextmanager
def worker_pool(workdir: str, name: str, env: Optional[dict] = None) -> Iterator[str]:
    """An external worker pool whose SDK workers get `env`, logging to `workdir`; its
    endpoint."""
    os.makedirs(workdir, exist_ok=True)
    process = None
    env = dict(os.environ if env is None else env)
    python = os.path.join(workdir, f"{name}-bin")   # the `python` its workers start
    os.makedirs(python, exist_ok=True)
    with open(os.path.join(python, "python"), "w") as f:   # a script: a venv stays one
        f.write(f'#!/bin/sh\nexec "{sys.executable}" "$@"\n')
    os.chmod(os.path.join(python, "python"), 0o755)
    env["PATH"] = os.pathsep.join([python, *filter(None, [env.get("PATH")])])
    try:
        port = free_port()
        log = os.path.join(workdir, f"{name}.log")
        process = _start([POOL, "--service_port", str(port)], env, log)
        with open(os.path.join(workdir, f"{name}.pid"), "w") as f:
            f.write(str(process.pid))   # its process group's id too (start_new_session)
        _wait_for_port(port, process, f"the worker pool {name}", log)
        yield f"localhost:{port}"
    finally:
        _stop(process)
