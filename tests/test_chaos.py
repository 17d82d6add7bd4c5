"""A short run of benchmarks/chaos.py: kills of every kind (SIGKILL, Ctrl-C, SIGTERM, a
run paused past its lease) at random moments of --overwrite and --append runs, each
followed by its four checks (old or new, --verify, the next run commits, nothing left
behind), each run a fork of a process that has imported the job (job_process.py). The
long run's counts, of commands in new interpreters, are in docs/guarantees.md."""
import os
import sys

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "benchmarks"))
import chaos  # noqa: E402
from job_process import JobProcess  # noqa: E402


@pytest.mark.slow
def test_kills_of_every_kind_leave_the_directory_whole_and_the_next_run_commits(tmp_path):
    result = chaos.run(len(chaos.KILLS), seed=11, work_dir=str(tmp_path),
                       log=lambda line: None, in_turn=True, start=JobProcess)
    assert result["counts"]["violations"] == 0, result["violations"]
    assert {kind.split()[1] for kind in result["counts"] if " " in kind} == set(chaos.KILLS)
    assert {kind.split()[0] for kind in result["counts"] if " " in kind} == {
        "overwrite", "append"}
