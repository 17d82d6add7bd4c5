"""A DataLoader worker's batches handed to the trainer without a copy (readers.numpy.handover):
read into a shared segment that the trainer maps, the segments reused only once the
trainer is done with them, and every batch the batch one process reads, in order, with
clips, transforms, selections and mixtures."""
import os
import pickle
import subprocess
import sys

import numpy as np
import pytest

from readers.clips import Clip
from readers.numpy import EpochBatches, Mixture, MixtureBatches, Select, WindowSource, handover

torch = pytest.importorskip("torch")
if not hasattr(os, "memfd_create"):
    pytest.skip("the handover needs memfd_create (Linux)", allow_module_level=True)


def _segment_of(tensor) -> tuple[str, int]:
    """(the mapping's name, its inode) of the memory a tensor's first byte lies in,
    from /proc/self/maps."""
    address = tensor.data_ptr()
    with open("/proc/self/maps") as f:
        for line in f:
            fields = line.split(maxsplit=5)
            start, end = (int(x, 16) for x in fields[0].split("-"))
            if start <= address < end:
                return (fields[5].strip() if len(fields) > 5 else "", int(fields[4]))
    raise AssertionError(f"no mapping holds {address:#x}")


def _loader(dataset, sampler, workers: int = 2):
    return torch.utils.data.DataLoader(dataset, sampler=sampler, batch_size=None,
                                       num_workers=workers)


def _same(batch: dict, expected: dict) -> None:
    assert list(batch) == list(expected)
    for key, value in expected.items():
        got = batch[key].numpy() if isinstance(batch[key], torch.Tensor) else batch[key]
        np.testing.assert_array_equal(got, value, err_msg=key)


def test_a_workers_batch_reaches_the_trainer_in_its_segment_in_order(datasets):
    """Each batch of an epoch, through two workers, is the batch read in one process,
    in the plan's order, and its numbers lie in a memfd the worker filled: no copy."""
    source = WindowSource(datasets["latent"], "train", clip=Clip(2, seed=4))
    plan = EpochBatches(source, 3, seed=1, epoch=2)
    seen = 0
    for step, batch in enumerate(_loader(plan.source, plan)):
        _same(batch, plan.source.read_batch(plan.batch(step)))
        for key in ("window", "mask", "start", "clip_offset"):
            assert _segment_of(batch[key])[0].startswith("/memfd:readers-batch"), key
        assert batch["video_id"].dtype.kind == "S"        # ids as a numpy bytes array
        seen += 1
    assert seen == plan.steps


def test_segments_are_reused_once_the_trainer_is_done_and_never_before(datasets):
    """A trainer that drops each batch gets them in at most POOLED segments a worker; one
    that keeps every batch finds each as it was read (no segment filled again while a
    batch over it lives)."""
    source = WindowSource(datasets["latent"], "train")
    plan = EpochBatches(source, 2, seed=3)
    assert plan.steps > handover.POOLED + 2
    inodes = set()
    for batch in _loader(plan.source, plan, workers=1):
        inodes.add(_segment_of(batch["window"])[1])
        del batch
    assert len(inodes) <= handover.POOLED
    kept = list(_loader(plan.source, plan, workers=1))
    assert len({_segment_of(batch["window"])[1] for batch in kept}) == plan.steps
    for step, batch in enumerate(kept):
        _same(batch, plan.source.read_batch(plan.batch(step)))


def _halved(batch: dict) -> dict:
    """A transform: a value made anew, views of read ones (strided, transposed), and
    one passed on."""
    return {"half": batch["window"] * 0.5, "mask": batch["mask"][:, ::2],
            "across": batch["window"].transpose(0, 2, 1), "start": batch["start"]}


def test_a_transform_and_a_selection_are_handed_over_too(datasets):
    """What a transform makes anew comes as DataLoader sends it; what lies in the
    segment (a view) without a copy; a selected source's windows are its own."""
    source = WindowSource(datasets["latent"], "train", transform=_halved,
                          select=Select(min_valid_frames=1))
    plan = EpochBatches(source, 3, seed=2)
    for step, batch in enumerate(_loader(plan.source, plan)):
        _same(batch, plan.source.read_batch(plan.batch(step)))
        for key in ("mask", "across"):
            assert _segment_of(batch[key])[0].startswith("/memfd:readers-batch"), key
        assert not _segment_of(batch["half"])[0].startswith("/memfd:readers-batch")


def test_a_mixtures_batches_are_joined_into_a_segment(datasets):
    mixture = Mixture([(WindowSource(datasets["latent"], "train"), 0.7),
                       (WindowSource(datasets["latent"], "train", clip=None), 0.3)], seed=5)
    plan = MixtureBatches(mixture, 4, epoch=1)
    for step, batch in enumerate(_loader(plan.source, plan)):
        _same(batch, plan.source.read_batch(plan.batch(step)))
        assert _segment_of(batch["window"])[0].startswith("/memfd:readers-batch")


def test_a_handed_batch_unpickles_as_views_of_its_segment_whatever_their_strides():
    """Arrays and tensors over the segment (backwards, strided, transposed) come back
    as the same values over the segment mapped again; the rest as pickled."""
    from multiprocessing.reduction import ForkingPickler

    arena = handover.Arena()
    grid = arena.allocate(4 * 6 * 5).view(np.float32).reshape(6, 5)
    grid[:] = np.arange(30).reshape(6, 5)
    sent = {"grid": grid, "back": grid[::-1, ::-2], "across": torch.from_numpy(grid).T,
            "ids": np.array([b"a", b"bc"]), "apart": np.ones(3)}
    got = pickle.loads(ForkingPickler.dumps(arena.handed(sent)))
    assert type(got) is dict and list(got) == list(sent)
    for key, value in sent.items():
        assert type(got[key]) is type(value), key
        np.testing.assert_array_equal(np.asarray(got[key]), np.asarray(value), err_msg=key)
    assert got["back"].strides == sent["back"].strides


def test_outside_a_worker_a_batch_is_the_processs_own(datasets):
    batch = WindowSource(datasets["latent"], "train").read_batch([0, 1])
    assert type(batch) is dict and handover.arena() is None


_FORKSERVER_LOADER = """
import os, pickle, sys
import psutil
import torch
from readers.numpy import EpochBatches, WindowSource
from readers.numpy.workers import end_with_parent, forkserver

if __name__ == "__main__":
    plan = EpochBatches(WindowSource(sys.argv[1], "train"), 3, seed=1)
    loader = torch.utils.data.DataLoader(plan.source, sampler=plan, batch_size=None,
                                         num_workers=2, multiprocessing_context=forkserver(),
                                         worker_init_fn=end_with_parent)
    batches = [b["start"].tolist() for b in loader]
    server = next(p for p in psutil.Process().children()
                  if "multiprocessing.forkserver" in " ".join(p.cmdline()))
    with open(f"/proc/{server.pid}/maps") as f:
        torch_in_server = "libtorch_cpu" in f.read()
    with open(os.environ["RESULT"], "wb") as f:
        pickle.dump((batches, [plan.source.read_batch(b)["start"].tolist() for b in plan],
                     torch_in_server), f)
"""


@pytest.mark.slow
def test_the_forkserver_has_torch_imported_before_it_forks_a_worker(datasets, tmp_path):
    """readers.numpy.workers.forkserver(): the server imported torch (its library is mapped
    there) before it forked the workers, which then need not import it each epoch; the
    batches are those read in one process."""
    pytest.importorskip("psutil")
    script = tmp_path / "loader.py"
    script.write_text(_FORKSERVER_LOADER)
    result = os.path.join(str(tmp_path), "result.pickle")
    done = subprocess.run([sys.executable, str(script), datasets["latent"]], timeout=600,
                          capture_output=True, text=True, env={**os.environ, "RESULT": result})
    assert done.returncode == 0, done.stderr[-3000:]
    with open(result, "rb") as f:
        batches, expected, torch_in_server = pickle.load(f)
    assert batches == expected and torch_in_server
