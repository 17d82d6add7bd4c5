"""Exact resume in readers.numpy: batches() at any step, a DataLoader with workers from a
saved state (EpochBatches), and a state or step out of range refused naming what is wrong
(the tf.data reader's checkpoints, and resumes across an append: tests/test_resume.py)."""
import json

import pytest

from readers.numpy import EpochBatches, WindowSource, batches


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
