"""Exact resume in readers.numpy: batches() at any step, a DataLoader with workers from a
saved state (EpochBatches), an epoch resumed on another number of ranks (elastic), and
a state or step out of range refused naming what is wrong (the tf.data reader's
checkpoints, and resumes across an append: tests/test_resume.py)."""
import collections
import json
import os
import pickle
import textwrap

import pytest
from helpers import assert_read_once, docs_code, run_apart, windows_read

from readers.numpy import EpochBatches, Select, WindowSource, batches


def test_start_step_and_epoch_out_of_range_are_refused(datasets):
    steps = len(WindowSource(datasets["latent"], "train")) // 2
    assert list(batches(datasets["latent"], "train", 2, start_step=steps)) == []   # the end
    for options, error, needle in (
            ({"start_step": -1}, ValueError, "start_step must be a whole number >= 0, not -1"),
            ({"start_step": steps + 1}, ValueError,
             rf"start_step must be a whole number in \[0, {steps}\], not {steps + 1}"),
            ({"start_step": 1.5}, TypeError, "start_step must be a whole number >= 0, not 1.5"),
            ({"start_step": True}, TypeError, "start_step must be a whole number >= 0, not True"),
            ({"epoch": -1}, ValueError, "epoch must be a whole number >= 0")):
        with pytest.raises(error, match=needle):
            batches(datasets["latent"], "train", 2, **options)      # when called


def test_batches_resume_exactly_at_any_step(datasets):
    path = datasets["latent"]
    full = [b["start"].tolist() + [v.decode() for v in b["video_id"]]
            for b in batches(path, "train", 5, seed=4, epoch=1)]
    assert len(full) >= 3
    for step in range(len(full) + 1):
        resumed = [b["start"].tolist() + [v.decode() for v in b["video_id"]]
                   for b in batches(path, "train", 5, seed=4, epoch=1, start_step=step)]
        assert resumed == full[step:], step
    hosts = [list(batches(path, "train", 2, seed=4, shard_index=k, num_shards=2))
             for k in range(2)]
    assert len(hosts[0]) == len(hosts[1])
    keys = [{(v, int(s)) for b in h for v, s in zip(b["video_id"], b["start"], strict=True)}
            for h in hosts]
    assert not keys[0] & keys[1]


def test_a_dataloader_with_two_workers_resumes_exactly_mid_epoch(datasets):
    """EpochBatches as the sampler: seeded, and a restart from a saved state gives the
    batches a run never stopped gave, whatever the workers' timing. Workers from a fork
    server: forked from this threaded process (Beam's pools, gcsfs's loop), a worker
    once never got its batch and the loader waited forever."""
    torch = pytest.importorskip("torch")

    source = WindowSource(datasets["latent"], "train")

    def keys(sampler, steps=None):
        loader = torch.utils.data.DataLoader(source, sampler=sampler, batch_size=None,
                                             num_workers=2,
                                             multiprocessing_context="forkserver")
        got = []
        for batch in loader:
            got.append([(v, int(s))
                        for v, s in zip(batch["video_id"], batch["start"], strict=True)])
            if steps is not None and len(got) == steps:
                break
        return got

    straight = keys(EpochBatches(source, 3, seed=7, epoch=2))
    assert len(straight) == len(source) // 3
    assert straight != keys(EpochBatches(source, 3, seed=7, epoch=3))   # seeded per epoch
    plan = EpochBatches(source, 3, seed=7, epoch=2)
    assert keys(plan, 2) == straight[:2]
    state = json.loads(json.dumps(plan.state(2)))          # beside the model's checkpoint
    assert keys(EpochBatches.resume(source, state)) == straight[2:]
    assert straight[2:] == [[(v, int(s)) for v, s in zip(b["video_id"], b["start"], strict=True)]
                            for b in batches(datasets["latent"], "train", 3, seed=7, epoch=2,
                                             start_step=2)]


def test_a_state_missing_a_field_or_of_the_wrong_type_is_refused_naming_it(datasets):
    source = WindowSource(datasets["latent"], "train")
    state = EpochBatches(source, 2, seed=1).state(1)
    for key, value, error, says in (
            ("shuffle", "false", TypeError, "shuffle must be True or False, not 'false'"),
            ("seed", "3", TypeError,
             r"seed must be a whole number in \[0, 9223372036854775807\], not '3'"),
            ("drop_remainder", "no", TypeError,
             "drop_remainder must be True or False, not 'no'"),
            ("windows", "279", TypeError, "windows must be a whole number >= 0, not '279'"),
            ("split", None, TypeError, "split must be a string, not None"),
            ("features", "window", TypeError,
             "features must be a list of feature names, not 'window'"),
            ("clip", {"length": 2}, TypeError,
             r"clip must be None or a Clip's fields, not \{'length': 2\}"),
            ("clip", {"length": 2, "step": 0, "offset": "start", "seed": 0}, ValueError,
             "Clip step must be a whole number >= 1, not 0"),
            ("order", "sideways", ValueError, "order must be one of random, stream"),
            ("start_step", 1.5, TypeError, "start_step must be a whole number >= 0"),
            ("start_step", 10**6, ValueError, r"start_step must be a whole number in \[0, ")):
        with pytest.raises(error, match=f"^this state's {says}"):
            EpochBatches.resume(source, {**state, key: value})
    without = {key: value for key, value in state.items() if key != "split"}
    with pytest.raises(ValueError, match=r"^this state lacks split: it is no state "
                                         r"EpochBatches.state gave"):
        EpochBatches.resume(source, without)
    with pytest.raises(TypeError, match="^state must be a dict, as EpochBatches.state gives "
                                        "it, not NoneType$"):
        EpochBatches.resume(source, None)
    with pytest.raises(ValueError, match=r"^step must be a whole number in \[0, \d+\], not -1$"):
        EpochBatches(source, 2).state(-1)


def _source(datasets, selected: bool) -> WindowSource:
    """The latent train split, or all but its first video's windows."""
    if not selected:
        return WindowSource(datasets["latent"], "train")
    first = WindowSource(datasets["latent"], "train")[0]["video_id"].decode()
    return WindowSource(datasets["latent"], "train", select=Select(exclude_videos=[first]))


def _resumed(source, state, world):
    return [EpochBatches.resume(source, state, shard_index=rank, num_shards=world)
            for rank in range(world)]


@pytest.mark.parametrize("options", [{}, {"shuffle": False}, {"order": "stream"},
                                     {"selected": True}],
                         ids=["random", "unshuffled", "stream", "selected"])
def test_an_epoch_resumes_on_another_number_of_ranks_reading_each_unread_window_once(
        datasets, options):
    """2 ranks stopped after step 5 resume on 3 and on 1, from either rank's state: the
    new ranks read the windows the old ones had not, each once, but fewer than 2 + 3
    (2 + 1) that equal shares leave out; again on 2 ranks from the 3's step 2 (fewer
    than 2 + 3 + 2 left out); the same plans every time, through a pickled copy too."""
    source = _source(datasets, options.pop("selected", False))
    two = [EpochBatches(source, 4, seed=3, epoch=1, shard_index=rank, num_shards=2,
                        drop_remainder=False, **options) for rank in range(2)]
    unread = collections.Counter(range(len(source))) - windows_read(two, 5)
    assert sum(unread.values()) == len(source) - 2 * 5 * 4
    state = json.loads(json.dumps(two[1].state(5)))
    for world in (3, 1):
        new = _resumed(source, state, world)
        assert_read_once(new, unread, 2 + world)
        batches_of = [list(plan) for plan in new]
        assert batches_of == [list(plan) for plan in _resumed(source, two[0].state(5), world)]
        assert batches_of == [list(pickle.loads(pickle.dumps(plan))) for plan in new]
        assert new[0].source.epoch == new[0].epoch == 1
    three = _resumed(source, state, 3)
    left = unread - windows_read(three, 2)
    again = _resumed(source, json.loads(json.dumps(three[2].state(2))), 2)
    assert_read_once(again, left, 2 + 3 + 2)
    assert again[1].state(1)["resumed_from"] == [{"num_shards": 2, "step": 5},
                                                 {"num_shards": 3, "step": 2}]
    # a resumed plan's state resumes strictly too: its own batches on
    assert list(EpochBatches.resume(source, json.loads(json.dumps(again[1].state(1))))) == \
        list(again[1])[1:]


def test_an_elastic_resume_on_as_many_ranks_is_each_ranks_own_resume(datasets):
    """Every rank may resume from one rank's state (rank 0's, saved beside the model):
    on the same number of ranks, each gets the batches its own state resumes; a state
    saved before resumed_from resumes as it did; at the epoch's end, nothing is left."""
    source = WindowSource(datasets["latent"], "train")
    ranks = [EpochBatches(source, 3, seed=5, shard_index=rank, num_shards=2) for rank in (0, 1)]
    assert [list(plan) for plan in _resumed(source, ranks[0].state(4), 2)] == \
        [list(EpochBatches.resume(source, plan.state(4))) for plan in ranks]
    old = {key: value for key, value in ranks[1].state(4).items() if key != "resumed_from"}
    assert list(EpochBatches.resume(source, old)) == list(ranks[1])[4:]
    assert [list(plan) for plan in _resumed(source, old, 3)] == \
        [list(plan) for plan in _resumed(source, ranks[1].state(4), 3)]
    ended = _resumed(source, ranks[0].state(ranks[0].steps), 5)
    assert [len(plan) for plan in ended] == [0] * 5       # 2 x 1 windows left: no batch


def test_drop_remainder_leaves_out_each_new_ranks_last_partial_batch(datasets):
    source = WindowSource(datasets["latent"], "train")
    for world in (3, 1):
        kept, whole = (_resumed(source, EpochBatches(source, 4, seed=2, num_shards=2,
                                                     drop_remainder=drop).state(3), world)
                       for drop in (True, False))
        for short, full in zip(kept, whole, strict=True):
            share = len(full.windows())
            assert short.steps == share // 4 and list(short) == list(full)[:share // 4]


def test_an_elastic_resume_refuses_wrong_ranks_and_states_in_one_line(datasets):
    source = WindowSource(datasets["latent"], "train")
    state = EpochBatches(source, 2, seed=1, num_shards=2).state(1)
    for ranks, error, says in (
            ({"shard_index": 3, "num_shards": 3}, ValueError,
             r"shard_index must be a whole number in \[0, 2\], not 3"),
            ({"shard_index": 0, "num_shards": 0}, ValueError,
             "num_shards must be a whole number >= 1, not 0"),
            ({"shard_index": 1.0, "num_shards": 2}, TypeError,
             r"shard_index must be a whole number in \[0, 1\], not 1.0"),
            ({"shard_index": 1}, TypeError, "shard_index and num_shards go together: pass "
                                            "both to resume on other ranks, or neither"),
            ({"num_shards": 2}, TypeError, "shard_index and num_shards go together")):
        with pytest.raises(error, match=f"^{says}") as e:
            EpochBatches.resume(source, state, **ranks)
        assert "\n" not in str(e.value)
    for history, error, says in (
            ("none", TypeError, "resumed_from must be a list of {num_shards, step}"),
            ([{"num_shards": 2}], TypeError, "resumed_from must be a list of"),
            ([{"num_shards": 0, "step": 1}], ValueError,
             "resumed_from's num_shards must be a whole number >= 1, not 0"),
            ([{"num_shards": 2, "step": 10**6}], ValueError,
             r"resumed_from's step must be a whole number in \[0, 24\], not 1000000")):
        with pytest.raises(error, match=f"^this state's {says}"):
            EpochBatches.resume(source, {**state, "resumed_from": history}, shard_index=0,
                                num_shards=3)
    # a state of another split is refused before any cut, as a strict resume refuses it
    with pytest.raises(ValueError, match=r"^this state, saved on .*, cannot resume on .* "
                                         r"split 'test': they differ in .*split"):
        EpochBatches.resume(WindowSource(datasets["latent"], "test"), state, shard_index=0,
                            num_shards=3)


# docs/readers.md's torchrun block as each rank of a job (RANK and WORLD_SIZE, as
# torchrun sets them), in the folder given it (one a rank, each with the state a job of
# 2 ranks saved): what each rank's plan holds, and each of its batches as its
# DataLoader's two workers read them.
_RANKS = textwrap.dedent('''
    import json, os, pickle, sys
    import numpy as np
    block, folders = sys.argv[1], json.loads(sys.argv[2])
    found = []
    for rank, folder in enumerate(folders):
        os.chdir(folder)
        os.environ.update(RANK=str(rank), WORLD_SIZE=str(len(folders)))
        names = {}
        exec(block, names)
        read = [[(bytes(v), int(s)) for v, s in zip(b["video_id"], np.asarray(b["start"]))]
                for b in names["loader"]]
        found.append((names["plan"].state(0), read))
    with open(os.environ["RESULT"], "wb") as f:
        pickle.dump(found, f)
''')


@pytest.mark.slow
def test_the_docs_torchrun_job_resumes_on_another_world_size(datasets, tmp_path):
    """The block as 3 ranks, after 2 ranks saved rank 0's state at step 1, in a fresh
    interpreter (DataLoader workers forked from it): the new ranks read the windows
    the 2 had not, each once, through their workers, and rank 0 saved its own state."""
    pytest.importorskip("torch")
    source = WindowSource(datasets["latent"], "train")
    old = [EpochBatches(source, 16, seed=0, shard_index=rank, num_shards=2) for rank in (0, 1)]
    folders = [tmp_path / f"rank{rank}" for rank in range(3)]
    for folder in folders:
        folder.mkdir()
        os.symlink(datasets["latent"], folder / "out")
        (folder / "epoch_state.json").write_text(json.dumps(old[0].state(1)))
    found = run_apart(_RANKS, docs_code("readers.md", "Another number of ranks"),
                      json.dumps([str(folder) for folder in folders]), tmp_path=tmp_path)
    new = [EpochBatches.resume(source, state) for state, _ in found]
    assert [(state["shard_index"], state["num_shards"], state["resumed_from"])
            for state, _ in found] == [(rank, 3, [{"num_shards": 2, "step": 1}])
                                       for rank in range(3)]
    unread = collections.Counter(range(len(source))) - windows_read(old, 1)
    assert_read_once(new, unread, 2 + 3 + 3 * 15)     # and each rank's last partial batch
    for plan, (_, read) in zip(new, found, strict=True):
        assert read == [[(bytes(v), int(s)) for v, s in zip(b["video_id"], b["start"],
                                                                strict=True)]
                        for b in map(source.read_batch, plan)]
    saved = json.loads((folders[0] / "epoch_state.json").read_text())
    assert saved["resumed_from"] == [{"num_shards": 2, "step": 1}]
    assert saved["start_step"] == new[0].steps > 0
