"""readers.numpy.workers: a DataLoader's worker processes end when the trainer dies, its
forkserver with them (docs/readers.md, PyTorch)."""
import json
import os
import signal
import subprocess
import sys

import pytest
from helpers import assert_session_ends, session_processes

# A trainer: a DataLoader with 2 forkserver workers (end_with_parent as their
# worker_init_fn, or none), which prints its workers' pids and their parents' (the
# forkserver) once both have read, then waits to be killed.
_TRAINER = """
import json, os, sys, time
import torch
from readers.numpy.workers import end_with_parent


class Pids(torch.utils.data.Dataset):
    def __len__(self):
        return 1000

    def __getitem__(self, i):
        return torch.tensor([os.getpid(), os.getppid()])


if __name__ == "__main__":
    loader = torch.utils.data.DataLoader(
        Pids(), batch_size=None, num_workers=2, multiprocessing_context="forkserver",
        worker_init_fn=end_with_parent if sys.argv[1] == "end_with_parent" else None)
    batches = iter(loader)
    pids = {pid for _ in range(4) for pid in next(batches).tolist()}
    print(json.dumps(sorted(pids)), flush=True)
    time.sleep(600)
"""


@pytest.mark.slow
def test_a_killed_trainer_takes_its_dataloader_workers_and_forkserver_along(tmp_path):
    """SIGKILL the trainer: its 2 workers, the forkserver that forked them and every
    other process of its session end (without end_with_parent, the workers and the
    forkserver run on for good)."""
    pytest.importorskip("torch")
    script = tmp_path / "trainer.py"
    script.write_text(_TRAINER)
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    trainer = subprocess.Popen(
        [sys.executable, str(script), "end_with_parent"], stdout=subprocess.PIPE, text=True,
        start_new_session=True, env={**os.environ, "PYTHONPATH": os.pathsep.join(
            [root, *filter(None, [os.environ.get("PYTHONPATH")])])})
    pids = set(json.loads(trainer.stdout.readline()))
    assert len(pids) == 3          # the 2 workers and the forkserver, their parent
    running = {int(line.split()[0]) for line in session_processes(trainer.pid)}
    assert pids <= running - {trainer.pid}
    trainer.send_signal(signal.SIGKILL)
    trainer.wait()
    trainer.stdout.close()
    assert_session_ends(trainer.pid)
