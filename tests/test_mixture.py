"""Mixtures of datasets and splits with weights (readers.mixing, readers.numpy.mixture,
readers.tfdata.mixed_dataset): an epoch's shares, its draws per (seed, epoch), per-rank
slices, the source of each window, features that cannot mix, exact resume in
readers.numpy (two DataLoader workers, a new process) and tf.data (checkpoints), and
both readers drawing the same windows, of whole sources and of selected ones.

The datasets: `kinds`' latent train (98 windows) and test (17) splits, and its float16
train split (19; read as float32 it mixes with the latent one)."""
import collections
import json
import os
import pickle
import textwrap

import numpy as np
import pytest
import tensorflow as tf
from helpers import assert_read_once, docs_code, run_apart, windows_read

import readers
from readers.clips import Clip
from readers.numpy import Mixture, MixtureBatches, Select, WindowSource
from readers.tfdata.mixed_dataset import MAX_EPOCH_WINDOWS


def _keys(batch) -> list[tuple]:
    """(source, video_id, start) of each window of a batch: what names a window in a
    mixture (two datasets cut from the same inputs share ids)."""
    values = [np.asarray(batch[k]) for k in ("source", "video_id", "start")]
    return [(int(s), bytes(v), int(t)) for s, v, t in zip(*values, strict=True)]


def _mixture(kinds, seed=1, **options):
    return Mixture([(WindowSource(kinds["latent"], "train"), 0.7),
                    (WindowSource(kinds["float16"], "train"), 0.3)], seed=seed, **options)


def _whole(plan):
    """Every window a plan reads, in order, as keys."""
    return [key for indices in plan for key in _keys(plan.source.read_batch(indices))]


def test_an_epoch_holds_the_weights_shares_and_is_a_function_of_seed_and_epoch(kinds):
    mixture = _mixture(kinds)
    sizes = [len(source) for source in mixture.sources]
    assert sizes == [98, 19] and mixture.epoch_windows == 117 == len(mixture)
    assert mixture.counts == (82, 35)             # 81.9 and 35.1, rounded to sum 117
    for epoch in range(3):
        plan = MixtureBatches(mixture, 5, epoch=epoch, drop_remainder=False)
        windows = _whole(plan)
        shares = np.bincount([s for s, _, _ in windows]) / len(windows)
        assert len(windows) == 117 and np.all(np.abs(shares - [0.7, 0.3]) < 1 / 117)
        assert windows == _whole(MixtureBatches(_mixture(kinds), 5, epoch=epoch,
                                                drop_remainder=False))   # seeded
        ones = collections.Counter(windows)
        # the latent split gives each window at most once an epoch, the float16 one (19
        # windows for 35 places) each once or twice
        assert max(n for (s, _, _), n in ones.items() if s == 0) == 1
        assert {n for (s, _, _), n in ones.items() if s == 1} == {1, 2}
        if epoch == 0:
            first = windows
    assert _whole(MixtureBatches(mixture, 5, epoch=1, drop_remainder=False)) != first
    assert _whole(MixtureBatches(_mixture(kinds, seed=2), 5, drop_remainder=False)) != first
    assert _mixture(kinds, epoch_windows=1000).counts == (700, 300)
    # a batch's rows are the windows their source gives for those numbers
    indices = MixtureBatches(mixture, 8).batch(0)
    batch = mixture.read_batch(indices)
    which, numbers = mixture.locate(indices)
    assert batch["source"].tolist() == which.tolist() and set(which) == {0, 1}
    for row, (source, number) in enumerate(zip(which, numbers, strict=True)):
        np.testing.assert_array_equal(
            batch["window"][row], mixture.sources[source].read_batch([number])["window"][0])
    assert mixture[indices[0]]["source"] == which[0]
    empty, alone = mixture.read_batch([]), mixture.sources[0].read_batch([])
    assert list(empty) == [*alone, "source"] and empty["source"].shape == (0,)
    assert all(empty[k].shape == alone[k].shape and empty[k].dtype == alone[k].dtype
               for k in alone)


def test_per_rank_slices_are_disjoint_hold_the_shares_and_cover_the_epoch(kinds):
    mixture = _mixture(kinds)
    epoch = collections.Counter(mixture.draws(2).tolist())
    for world in (2, 3, 4):
        ranks = [MixtureBatches(mixture, 3, epoch=2, shard_index=rank, num_shards=world)
                 for rank in range(world)]
        assert len({plan.steps for plan in ranks}) == 1          # the same steps everywhere
        orders = [mixture.order(2, rank, world) for rank in range(world)]
        dealt = collections.Counter(np.concatenate(orders).tolist())
        left = epoch - dealt
        assert not dealt - epoch and sum(left.values()) == 117 % world   # the remainder
        assert all(mixture.locate(list(left))[0] == 1)   # the last source's last draws
        for order in orders:
            assert len(order) == 117 // world
            per_source = np.bincount(mixture.locate(order)[0], minlength=2)
            assert np.all(np.abs(per_source - np.array([0.7, 0.3]) * 117 / world) < 2)


def test_sources_whose_features_differ_are_refused_in_one_line(kinds):
    latent = WindowSource(kinds["latent"], "train")
    for other, says in (
            (WindowSource(kinds["float16"], "train", keep_float16=True),
             r"feature 'window' is float32 \[4, 3\] in source 0 \(.*latent split 'train'\) "
             r"but float16 \[4, 3\] in source 1 \(.*float16 split 'train'\)"),
            (WindowSource(kinds["raw"], "train"),
             r"feature 'window' is float32 \[4, 3\] in .* but uint8 \[4, 24, 32, 3\] in"),
            (WindowSource(kinds["latent"], "test", features=["window", "mask"]),
             r"feature 'metadata' is float32 \[4\] in .* but none in source 1"),
            (WindowSource(kinds["latent"], "test", clip=Clip(2)),
             r"feature 'window' is float32 \[4, 3\] in .* but float32 \[2, 3\] in"),
            (WindowSource(kinds["latent"], "test", clip=Clip(4)),
             r"feature 'clip_offset' is none in .* but int64 \[\] in")):
        with pytest.raises(ValueError, match=rf"^these sources cannot be mixed: {says}") as e:
            Mixture([(latent, 1), (other, 1)])
        assert "\n" not in str(e.value)
    # clips that differ but cut the same shapes mix
    Mixture([(WindowSource(kinds["latent"], "train", clip=Clip(2)), 1),
             (WindowSource(kinds["latent"], "test", clip=Clip(2, step=2, offset="start")), 1)])
    with pytest.raises(ValueError, match=r"^source 1 \(.* split 'empty'\) has no windows"):
        Mixture([(latent, 1), (WindowSource(kinds["latent"], "empty"), 1)])
    for weight, error in ((0, ValueError), (-1, ValueError), (float("nan"), ValueError),
                          ("0.3", TypeError), (True, TypeError), (2**1100, ValueError)):
        with pytest.raises(error, match=r"^weight 1 must be a (finite )?number > 0"):
            Mixture([(latent, 1), (latent, weight)])
        with pytest.raises(error, match=r"^weight 1 must be a (finite )?number > 0"):
            readers.mix_datasets([(kinds["latent"], 1), (kinds["latent"], weight)])
    with pytest.raises(TypeError, match="^sources must be a list of"):
        Mixture(latent)
    with pytest.raises(TypeError, match=r"^source 1 is str '.*latent', not a source: a "
                                        r"Mixture mixes readers.numpy.WindowSources \(pass "
                                        r"WindowSource\(path, split\)\)$"):
        Mixture([(latent, 1), (kinds["latent"], 1)])
    with pytest.raises(ValueError, match="^these sources cannot be mixed: feature 'window'"):
        readers.mix_datasets([(kinds["latent"], 0.7), (kinds["float16"], 0.3)],
                             keep_float16=True)


def test_a_state_resumes_only_on_its_mixture_naming_what_differs(kinds):
    mixture = _mixture(kinds)
    plan = MixtureBatches(mixture, 4, epoch=1, shard_index=1, num_shards=2)
    state = json.loads(json.dumps(plan.state(3)))
    assert [(s["split"], s["windows"], s["weight"]) for s in state["sources"]] == [
        ("train", 98, 0.7), ("train", 19, 0.3)]
    assert {k: state[k] for k in ("seed", "epoch_windows", "epoch", "shard_index",
                                  "num_shards", "start_step")} == {
        "seed": 1, "epoch_windows": 117, "epoch": 1, "shard_index": 1, "num_shards": 2,
        "start_step": 3}
    assert list(MixtureBatches.resume(_mixture(kinds), state)) == list(plan)[3:]
    latent, half = (WindowSource(kinds[k], "train") for k in ("latent", "float16"))
    for other, differ in (
            (Mixture([(latent, 0.5), (half, 0.5)], seed=1),
             r"source 0's weight \(0.7 saved, 0.5 now\), source 1's weight"),
            (Mixture([(latent, 0.7), (WindowSource(kinds["latent"], "test"), 0.3)], seed=1),
             r"source 1's run_id \('\w+' saved, '\w+' now\), source 1's split \('train' "
             r"saved, 'test' now\), source 1's windows \(19 saved, 17 now\)"),
            (_mixture(kinds, seed=2), r"seed \(1 saved, 2 now\)"),
            (_mixture(kinds, epoch_windows=100), r"epoch_windows \(117 saved, 100 now\)"),
            (Mixture([(latent, 1)], seed=1), r"sources \(2 saved, 1 now\)")):
        with pytest.raises(ValueError, match=rf"^this state, saved on a mixture of \[.*\], "
                                             rf"cannot resume on a mixture of \[.*\]: they "
                                             rf"differ in {differ}.*; the same step would not "
                                             r"give the same batch") as e:
            MixtureBatches.resume(other, state)
        assert "\n" not in str(e.value)
    for key, value, error, says in (
            ("start_step", 10**6, ValueError, r"start_step must be a whole number in \[0, "),
            ("drop_remainder", "no", TypeError, "drop_remainder must be True or False"),
            ("shard_index", 2, ValueError, r"shard_index must be a whole number in \[0, 1\]")):
        with pytest.raises(error, match=f"^this state's {says}"):
            MixtureBatches.resume(mixture, {**state, key: value})
    with pytest.raises(ValueError, match="^this state lacks seed: it is no state "
                                         "MixtureBatches.state gave"):
        MixtureBatches.resume(mixture, {k: v for k, v in state.items() if k != "seed"})


def _resumed(mixture, state, world):
    return [MixtureBatches.resume(mixture, state, shard_index=rank, num_shards=world)
            for rank in range(world)]


def test_a_mixture_resumes_on_another_number_of_ranks_reading_each_unread_draw_once(kinds):
    """As EpochBatches (tests/readers_only/test_numpy_resume.py): 2 ranks stopped after
    step 5 resume on 3 and on 1 from either one's state, reading each draw of the epoch
    they had not read once (a window the epoch draws twice, twice), but fewer than
    2 + 3 (2 + 1); again on 2 from the 3's step 2; over a selected source too."""
    first = WindowSource(kinds["latent"], "train")[0]["video_id"].decode()
    for mixture in (_mixture(kinds), Mixture(
            [(WindowSource(kinds["latent"], "train", select=Select(exclude_videos=[first])),
              0.7), (WindowSource(kinds["float16"], "train"), 0.3)], seed=1)):
        two = [MixtureBatches(mixture, 4, epoch=1, shard_index=rank, num_shards=2,
                              drop_remainder=False) for rank in range(2)]
        assert two[0].epoch == 1
        unread = collections.Counter(mixture.draws(1).tolist()) - windows_read(two, 5)
        state = json.loads(json.dumps(two[0].state(5)))
        for world in (3, 1):
            new = _resumed(mixture, state, world)
            assert_read_once(new, unread, 2 + world)
            batches_of = [list(plan) for plan in new]
            assert batches_of == [list(plan) for plan in _resumed(mixture, two[1].state(5),
                                                                  world)]
            assert batches_of == [list(pickle.loads(pickle.dumps(plan))) for plan in new]
            assert new[0].epoch == 1
        three = _resumed(mixture, state, 3)
        left = unread - windows_read(three, 2)
        again = _resumed(mixture, json.loads(json.dumps(three[1].state(2))), 2)
        assert_read_once(again, left, 2 + 3 + 2)
        assert list(MixtureBatches.resume(mixture, again[0].state(1))) == list(again[0])[1:]
    # on as many ranks, each rank's own resume; a state without resumed_from as before
    mixture = _mixture(kinds)
    ranks = [MixtureBatches(mixture, 3, epoch=2, shard_index=rank, num_shards=2)
             for rank in (0, 1)]
    assert [list(plan) for plan in _resumed(mixture, ranks[0].state(4), 2)] == \
        [list(MixtureBatches.resume(mixture, plan.state(4))) for plan in ranks]
    old = {key: value for key, value in ranks[1].state(4).items() if key != "resumed_from"}
    assert list(MixtureBatches.resume(mixture, old)) == list(ranks[1])[4:]
    with pytest.raises(ValueError, match=r"^shard_index must be a whole number in \[0, 2\], "
                                         r"not 3$"):
        MixtureBatches.resume(mixture, old, shard_index=3, num_shards=3)
    with pytest.raises(ValueError, match=r"^this state, saved on a mixture of .* they differ "
                                         r"in seed \(1 saved, 2 now\)"):
        MixtureBatches.resume(_mixture(kinds, seed=2), old, shard_index=0, num_shards=3)


def test_a_mixture_takes_the_slices_and_masks_a_window_source_takes(kinds):
    mixture = _mixture(kinds)
    size = len(mixture)
    mask = np.arange(size) % 7 == 3
    for selector, windows in ((slice(3, 9, 2), [3, 5, 7]), (slice(None, None, -50), [116, 66, 16]),
                              (mask, np.flatnonzero(mask)), ([-1, 0], [116, 0]),
                              (np.array([5], np.uint8), [5])):
        assert _keys(mixture[selector]) == _keys(mixture.read_batch(windows))
        assert _keys(mixture.read_batch(selector)) == _keys(mixture.read_batch(windows))
    for selector, error, says in (
            (mask[1:], IndexError, f"a boolean mask of {size - 1} values for {size} windows"),
            ([0.5], TypeError, "windows are selected by integers, a slice or a boolean mask"),
            ([[0, 1]], TypeError, "windows are selected by integers"),
            ([size], IndexError, f"window {size} is out of range for {size} windows")):
        with pytest.raises(error, match=f"^{says}"):
            mixture[selector]


# Resumes the state in sys.argv[2] on the mixture of sys.argv[1]'s datasets, reading with
# two DataLoader workers; pickles the keys of the batches.
_RESUME = textwrap.dedent('''
    import json, os, pickle, sys
    import numpy as np
    import torch
    from readers.numpy import Mixture, MixtureBatches, Select, WindowSource
    latent, half = json.loads(sys.argv[1])
    mixture = Mixture([(WindowSource(latent, "train"), 0.7),
                       (WindowSource(half, "train"), 0.3)], seed=1)
    plan = MixtureBatches.resume(mixture, json.loads(sys.argv[2]))
    loader = torch.utils.data.DataLoader(plan.source, sampler=plan, batch_size=None,
                                         num_workers=2)
    keys = [[(int(s), bytes(v), int(t)) for s, v, t in
             zip(b["source"], np.asarray(b["video_id"]), b["start"])] for b in loader]
    with open(os.environ["RESULT"], "wb") as f:
        pickle.dump(keys, f)
''')


@pytest.mark.slow
def test_a_mixture_resumes_exactly_mid_epoch_with_two_workers_and_in_a_new_process(
        kinds, tmp_path):
    torch = pytest.importorskip("torch")
    mixture = _mixture(kinds)
    plan = MixtureBatches(mixture, 5, epoch=2)
    straight = [_keys(plan.source.read_batch(indices)) for indices in plan]
    assert len(straight) == 23
    state = json.loads(json.dumps(MixtureBatches(mixture, 5, epoch=2).state(9)))
    resumed = MixtureBatches.resume(_mixture(kinds), state)
    loader = torch.utils.data.DataLoader(resumed.source, sampler=resumed, batch_size=None,
                                         num_workers=2, multiprocessing_context="forkserver")
    assert [_keys(batch) for batch in loader] == straight[9:]
    apart = run_apart(_RESUME, json.dumps([kinds["latent"], kinds["float16"]]),
                      json.dumps(state), tmp_path=tmp_path)
    assert apart == straight[9:]


def _tf_keys(iterator, steps):
    return [_keys({k: v.numpy() for k, v in next(iterator).items()}) for _ in range(steps)]


def test_tf_and_numpy_mixtures_draw_the_same_windows_with_the_same_shares(kinds):
    both = [(kinds["latent"], "train", 98), (kinds["latent"], "test", 17)]
    numpy_epoch = _whole(MixtureBatches(Mixture(
        [(WindowSource(path, split), w) for path, split, w in both], seed=3), 5,
        drop_remainder=False))
    tf_epoch = [key for batch in readers.mix_datasets(both, batch_size=5, seed=3,
                                                      drop_remainder=False)
                for key in _keys({k: v.numpy() for k, v in batch.items()})]
    # weights in proportion to the sizes: each reads every window once
    assert sorted(tf_epoch) == sorted(numpy_epoch) and len(set(tf_epoch)) == 115
    assert tf_epoch != numpy_epoch                      # in orders of their own
    # 70/30 over three epochs: the same counts a source each epoch, out of its windows
    mixture = _mixture(kinds)
    every = [{(bytes(v), int(t)) for v, t in zip(batch["video_id"], batch["start"], strict=True)}
             for batch in (s.read_batch(range(len(s))) for s in mixture.sources)]
    ds = readers.mix_datasets([(kinds["latent"], 0.7), (kinds["float16"], 0.3)], "train",
                              9, seed=1, repeat=True)
    flat = [key for batch in _tf_keys(iter(ds), 39) for key in batch]     # 3 x 117
    for epoch in range(3):
        drawn = flat[epoch * 117:(epoch + 1) * 117]
        assert tuple(np.bincount([s for s, _, _ in drawn])) == mixture.counts
        assert all(key[1:] in every[key[0]] for key in drawn)
    assert flat[:117] != flat[117:234]


# select= in both forms, on the latent and float16 train splits: one for each source
# (None: the whole source), and one for every source (the id is in both datasets).
_SELECTS = {"one each": [Select(exclude_videos=["lat-0.tfrecord:2", "lat-1.tfrecord:4"]),
                         None],
            "one for all": Select(exclude_videos=["lat-0.tfrecord:2"])}


def _selected(kinds, select) -> list[WindowSource]:
    each = select if isinstance(select, list) else [select, select]
    return [WindowSource(kinds[name], "train", select=one)
            for name, one in zip(("latent", "float16"), each, strict=True)]


def _tf_epoch(ds) -> list[tuple]:
    return [key for batch in ds for key in _keys({k: v.numpy() for k, v in batch.items()})]


@pytest.mark.parametrize("form", _SELECTS)
def test_tf_and_numpy_mixtures_of_selections_read_the_same_windows(kinds, form):
    select, sources = _SELECTS[form], _selected(kinds, _SELECTS[form])
    kept = [{(i, bytes(v), int(t)) for v, t in zip(b["video_id"], b["start"], strict=True)}
            for i, b in enumerate(s.read_batch(slice(None)) for s in sources)]
    sizes = [len(s) for s in sources]
    assert sizes == ([65, 19] if form == "one each" else [80, 13])
    paths = [(kinds["latent"], sizes[0]), (kinds["float16"], sizes[1])]
    # weights in proportion to the sizes: both read every selected window once an epoch
    numpy_epoch = _whole(MixtureBatches(Mixture(list(zip(sources, sizes, strict=True)), seed=3),
                                        5, drop_remainder=False))
    tf_epoch = _tf_epoch(readers.mix_datasets(paths, batch_size=5, seed=3,
                                              drop_remainder=False, select=select))
    assert sorted(tf_epoch) == sorted(numpy_epoch) == sorted(kept[0] | kept[1])
    # 70/30 over three epochs: the same counts a source, each window of the source with
    # windows to spare at most once, of the other each once or twice: in both readers
    mixture = Mixture([(sources[0], 0.7), (sources[1], 0.3)], seed=1)
    windows = mixture.epoch_windows
    ds = readers.mix_datasets([(kinds["latent"], 0.7), (kinds["float16"], 0.3)], "train",
                              windows // 3, seed=1, repeat=True, select=select)
    flat = _tf_epoch(ds.take(9))
    for epoch in range(3):
        numpy_drawn = _whole(MixtureBatches(mixture, 6, epoch=epoch, drop_remainder=False))
        for drawn in (flat[epoch * windows:(epoch + 1) * windows], numpy_drawn):
            assert tuple(np.bincount([s for s, _, _ in drawn])) == mixture.counts
            ones = collections.Counter(drawn)
            assert max(n for (s, _, _), n in ones.items() if s == 0) == 1
            assert set(ones) - kept[0] == kept[1]         # every window of source 1
            assert set(ones) <= kept[0] | kept[1]


def test_selections_a_mixture_cannot_take_are_refused_in_one_line(kinds):
    sources = [(kinds["latent"], 0.7), (kinds["float16"], 0.3)]
    for select, error, says in (
            ([Select(min_valid_frames=1)], ValueError,
             r"select must be one readers.Select for every source, or a list of one for "
             r"each of the 2 sources \(None: the whole source\), not a list of 1$"),
            ([None, 3], TypeError, r"select\[1\] must be a readers.Select or None, not int 3$"),
            ("videos", TypeError, r"select must be one readers.Select for every source, or a "
                                  r"list of one for each of the 2 sources \(None: the whole "
                                  r"source\), not str 'videos'$"),
            ([None, Select(where=lambda row: False)], ValueError,
             r"Select\(where=.*\): 0 windows, sha256 \w+ keeps no window of split 'train' "
             r"of \S*float16$")):
        with pytest.raises(error, match=f"^{says}") as e:
            readers.mix_datasets(sources, select=select)
        assert "\n" not in str(e.value)


def test_a_tf_mixture_of_selections_resumes_and_its_checkpoint_names_them(kinds, tmp_path):
    select = _SELECTS["one each"]

    def mixed(select):    # epochs of 100 windows whatever the selections: 25 batches
        return iter(readers.mix_datasets([(kinds["latent"], 0.7), (kinds["float16"], 0.3)],
                                         "train", 4, seed=3, repeat=True, epoch_windows=100,
                                         select=select))

    straight = _tf_keys(mixed(select), 30)
    iterator = mixed(select)
    assert _tf_keys(iterator, 27) == straight[:27]
    saved = tf.train.Checkpoint(iterator=iterator).save(str(tmp_path / "c"))
    resumed = mixed(select)
    tf.train.Checkpoint(iterator=resumed).restore(saved).assert_consumed()
    assert _tf_keys(resumed, 3) == straight[27:]
    for other, differ in (
            (None, r"selections \(\[selections: source 0 Select\(exclude_videos=\['lat-0"
                   r".tfrecord:2', 'lat-1.tfrecord:4'\]\): 65 windows, sha256 \w+; source 1 "
                   r"every window\] saved, \[not named\] now\)"),
            ([None, Select(videos=["lat-0.tfrecord:0"])],
             r"selections \(\[selections: source 0 Select.*\] saved, \[selections: source 0 "
             r"every window; source 1 Select\(videos=\['lat-0.tfrecord:0'\]\): 7 windows, ")):
        with pytest.raises(ValueError, match=r"^this tf.data checkpoint reads a mixture of .*: "
                                             rf"they differ in {differ}") as e:
            tf.train.Checkpoint(iterator=mixed(other)).restore(saved)
        assert "\n" not in str(e.value)


def _runs(sources: np.ndarray) -> np.ndarray:
    """The lengths of the runs of one source in a row."""
    return np.diff(np.flatnonzero(np.diff(np.r_[-1, sources, -1])))


@pytest.mark.parametrize("weights", [(0.7, 0.3), (1, 1)], ids=["70-30", "1-1"])
def test_the_tf_mixture_mixes_as_documented_at_its_largest_epoch(kinds, weights):
    """60 batches of 64 from an epoch of the most windows mix_datasets takes: source 0's
    count a batch varies around 64 w_0 by sqrt(64 w_0 w_1) (3.7 at 0.7/0.3, 4 at 1:1:
    each window's source drawn for it), and its longest run of one source is what
    3,840 such draws give (about 20 at 0.7, 11 at 0.5; the bounds below are passed
    with probability under 1%). An index_shuffle of the epoch's places mixed an epoch of
    10**9 windows by a spread of 8.1, and at 10**12 gave 40 draws in a row from one
    source at 1:1 and a 0.70/0.29 split."""
    share = weights[0] / sum(weights)
    ds = readers.mix_datasets([(kinds["latent"], weights[0]), (kinds["float16"], weights[1])],
                              "train", 64, seed=1, epoch_windows=MAX_EPOCH_WINDOWS,
                              features=["start"])
    sources = np.concatenate([batch["source"].numpy() for batch in ds.take(60)])
    per_batch = (sources.reshape(60, 64) == 0).sum(axis=1)
    spread = np.sqrt(64 * share * (1 - share))
    assert abs(per_batch.mean() - 64 * share) < 3 * spread / np.sqrt(60)
    assert 0.75 * spread < per_batch.std() < 1.25 * spread
    assert _runs(sources).max() < (35 if share == 0.7 else 22)
    with pytest.raises(ValueError, match=rf"^epoch_windows must be a whole number in \[1, "
                                         rf"{MAX_EPOCH_WINDOWS}\], not {MAX_EPOCH_WINDOWS + 1}$"):
        readers.mix_datasets([(kinds["latent"], 1)], epoch_windows=MAX_EPOCH_WINDOWS + 1)


@pytest.mark.slow
def test_the_tf_mixture_resumes_exactly_from_a_checkpoint(kinds, tmp_path):
    """Over three epochs: the float16 source (19 windows, 35 an epoch) is passed over
    more than five times."""
    def mixed(**options):
        return iter(readers.mix_datasets([(kinds["latent"], 0.7), (kinds["float16"], 0.3)],
                                         "train", 4, seed=3, repeat=True, **options))

    straight = _tf_keys(mixed(), 88)
    for stop in (1, 29, 61):
        iterator = mixed()
        assert _tf_keys(iterator, stop) == straight[:stop]
        saved = tf.train.Checkpoint(iterator=iterator).save(str(tmp_path / f"c{stop}" / "c"))
        resumed = mixed()
        tf.train.Checkpoint(iterator=resumed).restore(saved).assert_consumed()
        assert _tf_keys(resumed, 88 - stop) == straight[stop:], stop
    other = iter(readers.mix_datasets([(kinds["latent"], 0.5), (kinds["float16"], 0.5)],
                                      "train", 4, seed=3, repeat=True))
    with pytest.raises(ValueError, match=r"this tf.data checkpoint reads a mixture of .*: "
                                         r"they differ in weights \(\[weights \[0.7, 0.3\]\] "
                                         r"saved, \[weights \[0.5, 0.5\]\] now\)") as e:
        tf.train.Checkpoint(iterator=other).restore(saved)
    assert "\n" not in str(e.value)


@pytest.mark.slow
def test_the_docs_latent_mixtures_run(kinds, tmp_path, monkeypatch):
    """docs/readers.md's 70/30 mixture of two latent datasets: readers.numpy's with two
    DataLoader workers in a fresh interpreter (the block as it stands), and tf.data's
    here, whole and selected."""
    monkeypatch.chdir(tmp_path)
    os.symlink(kinds["latent"], tmp_path / "latents_a")
    os.symlink(kinds["float16"], tmp_path / "latents_b")
    code = (docs_code("readers.md", "Mixtures of datasets")
            + "import os, pickle\nwith open(os.environ['RESULT'], 'wb') as f:\n"
              "    pickle.dump((step, batch['source'].tolist(), state), f)\n")
    step, sources, state = run_apart(code, tmp_path=tmp_path)
    assert step == 0 and len(sources) == 64 and set(sources) == {0, 1}
    assert state["start_step"] == 1 and [s["weight"] for s in state["sources"]] == [0.7, 0.3]
    shown = {}
    exec(docs_code("readers.md", "Mixtures in tf.data"), shown)
    assert shown["batch"]["source"].shape == (64,)
    exec(docs_code("readers.md", "Mixtures in tf.data", 1), shown)     # with a selection
    assert next(iter(shown["ds"]))["source"].shape == (64,)


def _window_as_list(batch: dict) -> dict:
    return {**batch, "window": batch["window"].tolist()}


def test_a_source_whose_transform_gives_no_array_is_named_with_what_it_gave(kinds):
    mixture = Mixture([(WindowSource(kinds["latent"], "train"), 1),
                       (WindowSource(kinds["latent"], "test", transform=_window_as_list), 1)])
    with pytest.raises(TypeError, match=r"^\S*latent split 'test' gave list for 'window': "
                                        r"a mixture joins numpy arrays"):
        mixture[np.arange(len(mixture))]
