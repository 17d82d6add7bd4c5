"""A short run of benchmarks/chaos.py: each operation (a rebuild; appends of a new file,
over a widened --input, after a rename or move, with a damaged video, and with
--retry_failed after its repair) once, each killed at a random moment with a kill of
every kind in turn (SIGKILL, Ctrl-C, SIGTERM, a run paused past its lease), each
followed by its five checks (old or new, --verify, values against the inputs, the next
run commits, nothing left behind), each run a fork of a process that has imported the
job (job_process.py). The long run's counts, of commands in new interpreters, are in
docs/guarantees.md."""
import os
import sys

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "benchmarks"))
import chaos  # noqa: E402
from job_process import JobProcess  # noqa: E402


@pytest.mark.slow
def test_kills_of_every_kind_in_every_operation_leave_the_dataset_whole_and_its_values_true(
        tmp_path):
    result = chaos.run(max(len(chaos.OPERATIONS), len(chaos.KILLS)), seed=11,
                       work_dir=str(tmp_path), log=lambda line: None, in_turn=True,
                       start=JobProcess)
    assert result["counts"]["violations"] == 0, result["violations"]
    kinds = [kind.split() for kind in result["counts"] if " " in kind]
    assert {op for op, _ in kinds} == set(chaos.OPERATIONS)
    assert {kill for _, kill in kinds} == set(chaos.KILLS)
