"""--all_cores's workers are forks of the launcher (beam_jobs.runtime.forked_workers), on Beam's
real FnApiRunner: they run the pipeline's work, report its failures, and leave nothing
behind, even when the launcher is killed.

Each case runs in a new interpreter, as the job's launcher does: a process that has
already run a pipeline (this one) holds gRPC's threads, and a fork would copy them half
way."""
import glob
import json
import os
import signal
import subprocess
import sys
import tempfile
import textwrap
import threading
import time

import pytest

from beam_jobs.runtime import forked_workers

_FOLDERS = os.path.join(tempfile.gettempdir(), "make_shards-workers-*")
_PIPELINE = """
import json, os, sys
import apache_beam as beam
from apache_beam.options.pipeline_options import PipelineOptions
from apache_beam.runners.portability.fn_api_runner import FnApiRunner
from beam_jobs.runtime import forked_workers

sys.forked_workers_test = "inherited"   # a mark only a fork of this process has
LAUNCHER = os.getpid()


def where(element):
    if element == {fail}:
        raise ValueError("element {fail} is not welcome")
    return os.getpid() != LAUNCHER, getattr(sys, "forked_workers_test", None)


with forked_workers.environment() as environment:
    with beam.Pipeline(runner=FnApiRunner(default_environment=environment),
                       options=PipelineOptions(direct_num_workers=2)) as p:
        seen = p | beam.Create(list(range(40))) | beam.Reshuffle() | beam.Map(where)
        _ = (seen | beam.combiners.Count.PerElement() | beam.combiners.ToList()
             | beam.Map(lambda rows: print(json.dumps(sorted(rows)), flush=True)))
"""


def _pipeline(fail: int = -1) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", _PIPELINE.format(fail=fail)],
                          capture_output=True, text=True, timeout=300)


@pytest.mark.slow
def test_workers_are_forks_that_run_the_work_and_leave_nothing():
    before = set(glob.glob(_FOLDERS))
    done = _pipeline()
    assert done.returncode == 0, done.stderr[-3000:]
    # all 40 elements, each in a process other than the launcher, a fork (with the mark)
    assert json.loads(done.stdout.splitlines()[-1]) == [[[True, "inherited"], 40]]
    assert set(glob.glob(_FOLDERS)) == before   # the zygote removed its socket


@pytest.mark.slow
def test_a_failure_in_a_worker_fails_the_pipeline_with_its_message():
    before = set(glob.glob(_FOLDERS))
    done = _pipeline(fail=7)
    assert done.returncode == 1
    assert "ValueError: element 7 is not welcome" in done.stderr
    assert set(glob.glob(_FOLDERS)) == before


@pytest.mark.slow
def test_a_killed_launcher_takes_its_zygote_and_socket_along():
    script = textwrap.dedent("""
        import time
        from beam_jobs.runtime import forked_workers
        with forked_workers.environment() as environment:
            print(environment.command_string.split()[-1], flush=True)
            time.sleep(600)
    """)
    launcher = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE,
                                text=True, start_new_session=True)
    folder = os.path.dirname(launcher.stdout.readline().strip())
    assert os.path.isdir(folder)
    launcher.send_signal(signal.SIGKILL)
    launcher.wait()

    def left() -> str:   # the processes of the launcher's session: its zygote
        return subprocess.run(["pgrep", "-s", str(launcher.pid)], capture_output=True,
                              text=True).stdout.strip()

    deadline = time.monotonic() + 60   # a bound for a stuck zygote, not a speed
    while (os.path.exists(folder) or left()) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not os.path.exists(folder) and not left()


def test_a_process_running_a_thread_is_refused():
    stop = threading.Event()
    thread = threading.Thread(target=stop.wait)
    thread.start()
    try:
        with pytest.raises(RuntimeError, match="running no other thread"):
            with forked_workers.environment():
                pass
    finally:
        stop.set()
        thread.join()
