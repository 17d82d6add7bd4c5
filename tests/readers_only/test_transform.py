"""readers.numpy's `transform=`: it runs where a batch is read (batches' threads, a
DataLoader's worker processes), on the batch a clip cut, and a resume with the same
transform gives the batches of a run never stopped. And a WindowSource's repr, by which
Grain resumes a checkpoint in a new process.

The transforms are module-level functions: a DataLoader's forkserver workers unpickle
them by name (this module imports nothing heavy, for them)."""
import functools
import json
import os
import pickle
import subprocess
import sys
import threading
import zlib

import numpy as np
import pytest

from readers.clips import Clip
from readers.numpy import EpochBatches, WindowSource, batches


def where_read(batch: dict) -> dict:
    """The batch, with the process, thread and DataLoader worker (-1: none) that read it."""
    torch = sys.modules.get("torch")
    info = torch.utils.data.get_worker_info() if torch is not None else None
    rows = len(batch["start"])
    return {**batch, "pid": np.full(rows, os.getpid()),
            "thread": np.full(rows, threading.get_ident(), np.uint64),
            "worker": np.full(rows, -1 if info is None else info.id)}


def jitter(batch: dict, scale: float = 0.1) -> dict:
    """Noise on the window, drawn from the batch itself (its windows' starts and ids, its
    clips' offsets): the same batch gets the same noise in any process, at any step."""
    seed = [int(s) for s in batch["start"]] + [zlib.crc32(v) for v in batch["video_id"]]
    seed += [int(o) for o in batch.get("clip_offset", ())]
    noise = np.random.default_rng(seed).standard_normal(batch["window"].shape, np.float32)
    return {**batch, "window": batch["window"] + scale * noise}


def jitter_where_read(batch: dict) -> dict:
    return where_read(jitter(batch))


def shift(batch: dict) -> dict:
    """Next-frame targets: inputs the frames but the last, targets the frames but the
    first (what a sequence model trains on)."""
    window, mask = batch["window"], batch["mask"]
    return {"inputs": window[:, :-1], "targets": window[:, 1:],
            "weights": mask[:, 1:] * mask[:, :-1],
            **{name: batch[name] for name in ("clip_offset", "start", "video_id")
               if name in batch}}


def _equal(a: dict, b: dict, skip=("pid", "thread", "worker")) -> None:
    assert sorted(a) == sorted(b)
    for name in a:
        if name not in skip:
            np.testing.assert_array_equal(np.asarray(a[name]), np.asarray(b[name]), name)


def test_batches_run_the_transform_in_their_threads(datasets):
    path = datasets["latent"]
    plain = list(batches(path, "train", 3, seed=2))
    read = list(batches(path, "train", 3, seed=2, threads=2, transform=where_read))
    assert len(read) == len(plain) >= 3
    main = threading.get_ident()
    assert {int(t) for b in read for t in b["thread"]}.isdisjoint({main})
    assert {int(p) for b in read for p in b["pid"]} == {os.getpid()}
    for ours, theirs in zip(read, plain, strict=True):
        _equal(ours, where_read(theirs))


def test_the_transform_sees_the_clipped_batch_with_its_offsets(datasets):
    path, clip = datasets["latent"], Clip(3, offset="random", seed=7)
    plain = list(batches(path, "train", 4, seed=1, epoch=2, clip=clip))
    shifted = list(batches(path, "train", 4, seed=1, epoch=2, clip=clip, transform=shift))
    assert len(shifted) == len(plain)
    for ours, theirs in zip(shifted, plain, strict=True):
        assert ours["inputs"].shape == (4, 2, 3) and ours["targets"].shape == (4, 2, 3)
        _equal(ours, shift(theirs))
    assert len({int(o) for b in shifted for o in b["clip_offset"]}) == 2   # random: 0, 1


def test_source_items_are_rows_of_a_transformed_batch_of_one(datasets):
    plain = WindowSource(datasets["latent"], "train")
    source = WindowSource(datasets["latent"], "train", transform=shift)
    assert source[[2, 5]]["inputs"].shape == (2, 3, 3)
    for i in (0, 5, -1):
        item = source[i]
        assert item["inputs"].shape == (3, 3) and type(item["video_id"]) is np.bytes_
        _equal(item, {name: column[0] for name, column in
                      shift(plain.read_batch([i])).items()})
    clone = pickle.loads(pickle.dumps(WindowSource(datasets["latent"], "train", transform=shift)))
    _equal(clone[3], source[3])


def test_a_transform_that_is_no_function_or_gives_no_dict_is_one_line(datasets):
    with pytest.raises(TypeError, match=r"^transform must be a function or None, not int 3$"):
        WindowSource(datasets["latent"], "train", transform=3)
    with pytest.raises(TypeError, match="^transform must be a function or None, not str"):
        batches(datasets["latent"], "train", 2, transform="shift")        # when called
    tuples = batches(datasets["latent"], "train", 2, transform=lambda b: (b["window"],))
    with pytest.raises(TypeError, match=r"^transform test_transform\.test_a_transform.*"
                                        r"<lambda> returned tuple, not a dict"):
        next(tuples)


def test_dataloader_workers_run_the_transform_and_a_resume_gives_the_same_batches(datasets):
    """EpochBatches as a DataLoader's sampler: each batch is read, and transformed, in a
    worker process; resumed from a state with the same transform, the batches after it
    are those of the run never stopped (the jitter is drawn from each batch)."""
    torch = pytest.importorskip("torch")
    path = datasets["latent"]

    def loader(plan):
        return torch.utils.data.DataLoader(plan.source, sampler=plan, batch_size=None,
                                           num_workers=2,
                                           multiprocessing_context="forkserver")

    source = WindowSource(path, "train", transform=jitter_where_read)
    plan = EpochBatches(source, 3, seed=4, epoch=1)
    straight = list(loader(plan))
    assert len(straight) == plan.steps >= 4
    assert {int(p) for b in straight for p in b["pid"]}.isdisjoint({os.getpid()})
    assert {int(w) for b in straight for w in b["worker"]} == {0, 1}
    plain = WindowSource(path, "train")
    for step, batch in enumerate(straight):
        assert batch["window"].dtype == torch.float32
        _equal(batch, where_read(jitter(plain.read_batch(plan.batch(step)))))
    state = json.loads(json.dumps(plan.state(2)))
    resumed = EpochBatches.resume(WindowSource(path, "train", transform=jitter_where_read),
                                  state)
    again = list(loader(resumed))
    assert len(again) == len(straight) - 2
    for ours, theirs in zip(again, straight[2:], strict=True):
        _equal(ours, theirs)


def test_the_repr_names_what_index_i_returns_and_no_address(datasets):
    path = datasets["png"]
    source = WindowSource(path, "train", ["window", "start"], float_pixels=True,
                          clip=Clip(2, offset="start"), epoch=3,
                          transform=functools.partial(jitter, scale=0.5))
    text = repr(source)
    run_id = source.spec.run_id
    assert text == (f"WindowSource(path={path!r}, split='train', run_id={run_id!r}, "
                    "features=['window', 'start'], float_pixels=True, keep_float16=False, "
                    "clip=Clip(length=2, step=1, offset='start', seed=0), epoch=3, "
                    "transform=functools.partial(test_transform.jitter, scale=0.5))")
    assert repr(pickle.loads(pickle.dumps(source))) == text
    assert repr(source.for_epoch(4)) == text.replace("epoch=3", "epoch=4")
    assert "transform=test_transform.shift)" in repr(WindowSource(path, transform=shift))
    assert repr(WindowSource(path)).endswith("epoch=0, transform=None)")


# Grain's loader over the latent kind, 2 workers (each window read and shifted in one):
# with "save", two batches, then its state to a file and the next batch; with "load",
# the state from the file, then the next batch.
_GRAIN = """
import json, sys
import grain.python as grain
from readers.numpy import WindowSource

if __name__ == "__main__":
    tests, path, mode, saved = sys.argv[1:]
    sys.path.insert(0, tests)
    from test_transform import shift

    source = WindowSource(path, "train", transform=shift)
    loader = grain.DataLoader(
        data_source=source,
        sampler=grain.IndexSampler(len(source), grain.NoSharding(), shuffle=True, seed=3,
                                   num_epochs=1),
        operations=[grain.Batch(3, drop_remainder=True)], worker_count=2)
    batches = iter(loader)
    if mode == "save":
        next(batches), next(batches)
        with open(saved, "wb") as f:
            f.write(batches.get_state())
    else:
        with open(saved, "rb") as f:
            batches.set_state(f.read())
    batch = next(batches)
    print(json.dumps([batch["video_id"].astype(str).tolist(), batch["start"].tolist(),
                      batch["inputs"].sum().item(), batch["targets"].shape]))
"""


@pytest.mark.slow
def test_grain_resumes_a_saved_state_in_a_new_process(datasets, tmp_path):
    pytest.importorskip("grain.python")
    saved = str(tmp_path / "grain_state")

    def next_batch(mode: str):
        done = subprocess.run([sys.executable, "-c", _GRAIN, os.path.dirname(__file__),
                               datasets["latent"], mode, saved],
                              capture_output=True, text=True, timeout=300)
        assert done.returncode == 0, done.stderr[-3000:]
        return json.loads(done.stdout.strip().splitlines()[-1])

    first = next_batch("save")
    assert first[3] == [3, 3, 3]       # shifted in the workers: 3 of each window's 4 frames
    with open(saved) as f:
        source = json.load(f)["data_source"]
    assert "0x" not in source and datasets["latent"] in source
    assert source.endswith("transform=test_transform.shift)")
    assert next_batch("load") == first
