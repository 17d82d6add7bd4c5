"""Exact resume: batches() at any step, a DataLoader with workers from a saved state
(EpochBatches), tf.data from its checkpoint; and a resume refused where it would not
mean the same windows (another dataset, an append since, a step out of range)."""
import json

import pytest
import tensorflow as tf

import readers
from helpers import random_videos, run_job, write_videos
from readers.numpy import WindowSource, batches


def test_start_step_and_epoch_out_of_range_are_refused(kinds):
    steps = len(WindowSource(kinds["latent"], "train")) // 2
    assert list(batches(kinds["latent"], "train", 2, start_step=steps)) == []   # the end
    for options, needle in (({"start_step": -1}, rf"start_step must be in \[0, {steps}\]"),
                            ({"start_step": steps + 1}, "start_step must be in"),
                            ({"start_step": 1.5}, "start_step must be in"),
                            ({"epoch": -1}, "epoch must be a whole number >= 0")):
        with pytest.raises(ValueError, match=needle):
            next(batches(kinds["latent"], "train", 2, **options))


def test_batches_resume_exactly_at_any_step(kinds):
    path = kinds["latent"]
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
    keys = [{(v, int(s)) for b in h for v, s in zip(b["video_id"], b["start"])} for h in hosts]
    assert not keys[0] & keys[1]


@pytest.mark.slow
def test_the_tf_reader_resumes_exactly_from_a_checkpoint(kinds, tmp_path):
    path = kinds["latent"]
    windows = readers.load_spec(path).splits["train"].windows
    steps = 2 * windows // 3 + 3            # past the first epoch's end

    def keys(iterator, n):
        return [[(v, int(s)) for v, s in zip(b["video_id"].numpy(), b["start"].numpy())]
                for b in (next(iterator) for _ in range(n))]

    straight = keys(iter(readers.make_dataset(path, batch_size=3, seed=5, repeat=True)), steps)
    for stop in (1, steps // 2, windows // 3, steps - 2):
        iterator = iter(readers.make_dataset(path, batch_size=3, seed=5, repeat=True))
        assert keys(iterator, stop) == straight[:stop]
        saved = tf.train.Checkpoint(iterator=iterator).save(str(tmp_path / f"c{stop}" / "ckpt"))
        resumed = iter(readers.make_dataset(path, batch_size=3, seed=5, repeat=True))
        tf.train.Checkpoint(iterator=resumed).restore(saved).assert_consumed()
        assert keys(resumed, steps - stop) == straight[stop:], stop


def test_a_tf_checkpoint_restored_on_another_dataset_is_refused(kinds, tmp_path):
    """tf.data saves the pipeline's graph with its state: restored on another dataset's
    iterator, it went on reading the shards it was saved from."""
    iterator = iter(readers.make_dataset(kinds["latent"], batch_size=2, seed=1, repeat=True))
    next(iterator)
    saved = tf.train.Checkpoint(iterator=iterator).save(str(tmp_path / "ckpt"))
    for other, split in ((kinds["float16"], "train"), (kinds["latent"], "test")):
        elsewhere = iter(readers.make_dataset(other, split, batch_size=2, seed=1, repeat=True))
        with pytest.raises(ValueError) as refused:
            tf.train.Checkpoint(iterator=elsewhere).restore(saved)
        message = str(refused.value)
        assert f"this tf.data checkpoint reads {kinds['latent']} (run " in message
        assert f"restored on a reader of {other} (run " in message and "\n" not in message


def test_a_dataloader_with_two_workers_resumes_exactly_mid_epoch(kinds):
    """EpochBatches as the sampler: seeded, and a restart from a saved state gives the
    batches a run never stopped gave, whatever the workers' timing. Workers from a fork
    server: forked from this threaded process (Beam's pools, gcsfs's loop), a worker
    once never got its batch and the loader waited forever."""
    torch = pytest.importorskip("torch")
    from readers.numpy import EpochBatches

    source = WindowSource(kinds["latent"], "train")

    def keys(sampler, steps=None):
        loader = torch.utils.data.DataLoader(source, sampler=sampler, batch_size=None,
                                             num_workers=2,
                                             multiprocessing_context="forkserver")
        got = []
        for batch in loader:
            got.append([(v, int(s)) for v, s in zip(batch["video_id"], batch["start"])])
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
    assert straight[2:] == [[(v, int(s)) for v, s in zip(b["video_id"], b["start"])]
                            for b in batches(kinds["latent"], "train", 3, seed=7, epoch=2,
                                             start_step=2)]


def test_a_state_saved_before_an_append_is_refused(tmp_path, rng):
    """An append changes the permutation (it is over every window): step k of the old
    epoch does not name the same windows in the grown one."""
    from readers.numpy import EpochBatches

    write_videos(str(tmp_path / "day1"), random_videos(rng, 6), files=1)
    run_job(str(tmp_path / "day1" / "*"), tmp_path / "out", "--window", "4")
    state = EpochBatches(WindowSource(str(tmp_path / "out")), 2, seed=1).state(3)
    write_videos(str(tmp_path / "day2"), random_videos(rng, 3), files=1)
    run_job(str(tmp_path / "day*" / "*"), tmp_path / "out", "--window", "4", "--append")
    grown = WindowSource(str(tmp_path / "out"))
    with pytest.raises(ValueError, match=r"this state was saved on run \w+ with \d+ windows; "
                                         r".* is now run \w+ with \d+ \(an --append"):
        EpochBatches.resume(grown, state)
