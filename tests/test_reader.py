"""The tf.data reader over a dataset written by the job, and readers.numpy's windows
against it."""
import collections
import json
import os
import platform
import re
import shutil
import subprocess
import sys

import numpy as np
import pytest
import tensorflow as tf
from helpers import (
    assert_same_windows,
    index_offsets,
    read_dataset_json,
    read_examples,
    run_job,
    windows_by_key,
)
from input_files import latent_example, random_videos, write_records, write_videos

import readers
from readers.clips import Clip
from readers.numpy import EpochBatches, Mixture, WindowSource, batches


@pytest.fixture(scope="module")
def dataset(tmp_path_factory):
    """30 videos of 3-dim latents, 4 train shards, 2 validation shards."""
    directory = tmp_path_factory.mktemp("reader")
    write_videos(str(directory / "in"), random_videos(np.random.default_rng(5), 30,
                                                      lengths=(20, 40)), files=3)
    run_job(str(directory / "in" / "*"), directory / "out", "--window", "8", "--stride", "4",
            "--splits", "train=0.7,validation=0.3", "--num_shards", "4")
    return str(directory / "out")


def test_batches_have_static_shapes_and_cover_the_split(dataset):
    spec = readers.load_spec(dataset)
    ds = readers.make_dataset(dataset, "train", batch_size=5)
    assert {k: v.shape.as_list() for k, v in ds.element_spec.items()} == {
        "window": [5, 8, 3], "mask": [5, 8], "metadata": [5, 4], "video_id": [5], "start": [5]}
    assert ds.element_spec["window"].dtype == tf.float32
    batches = list(ds)
    assert len(batches) == spec.splits["train"].windows // 5
    everything = list(readers.make_dataset(dataset, "train", batch_size=5, drop_remainder=False))
    keys = {(v.decode(), int(s)) for b in everything
            for v, s in zip(b["video_id"].numpy(), b["start"].numpy(), strict=True)}
    assert len(keys) == spec.splits["train"].windows


def test_values_match_the_shards(dataset):
    expected = {(e["video_id"], int(e["start"])): e for e in read_examples(dataset, "validation")}
    for batch in readers.make_dataset(dataset, "validation", batch_size=4, drop_remainder=False):
        for i, (vid, start) in enumerate(zip(batch["video_id"].numpy(), batch["start"].numpy(),
                                             strict=True)):
            e = expected[(vid.decode(), int(start))]
            np.testing.assert_array_equal(batch["window"][i].numpy(), e["window"])
            np.testing.assert_array_equal(batch["mask"][i].numpy(), e["mask"])
            np.testing.assert_array_equal(batch["metadata"][i].numpy(), e["metadata"])


def _order(ds):
    return [(v, int(s)) for b in ds
            for v, s in zip(b["video_id"].numpy(), b["start"].numpy(), strict=True)]


@pytest.mark.parametrize("shuffle", [False, True])
def test_the_public_api_gives_what_the_internals_give(dataset, monkeypatch, shuffle):
    """On the pinned TensorFlow the reader is built from tf.data's internal classes
    (readers/tfdata/tf_internals.py); on any other, from the public API, slower: the same
    records in the same order, whether shuffled (with a seed) or not."""
    from readers.tfdata import tf_internals
    assert tf_internals.USING_INTERNALS      # the pinned TensorFlow: the fast path is tested
    fast = [b for b in readers.make_dataset(dataset, batch_size=4, shuffle=shuffle, seed=3)]
    monkeypatch.setattr(tf_internals, "_INTERNALS", None)
    public = [b for b in readers.make_dataset(dataset, batch_size=4, shuffle=shuffle, seed=3)]
    assert len(fast) == len(public) and fast
    for ours, theirs in zip(fast, public, strict=True):
        for name, values in ours.items():
            np.testing.assert_array_equal(values.numpy(), theirs[name].numpy(), err_msg=name)


def test_a_seed_makes_the_order_reproducible_and_epochs_differ(dataset):
    first = _order(readers.make_dataset(dataset, batch_size=4, seed=3))
    assert first == _order(readers.make_dataset(dataset, batch_size=4, seed=3))
    assert first != _order(readers.make_dataset(dataset, batch_size=4, seed=4))
    once = readers.make_dataset(dataset, batch_size=4, seed=3)   # Keras' fit: iter() an epoch
    assert _order(once) == first and _order(once) != first
    windows = readers.load_spec(dataset).splits["train"].windows
    repeated = _order(readers.make_dataset(dataset, batch_size=1, seed=3, repeat=True)
                      .take(2 * windows))
    epoch1, epoch2 = repeated[:windows], repeated[windows:]
    assert sorted(epoch1) == sorted(epoch2) and len(set(epoch1)) == windows
    assert epoch1 != epoch2


def test_without_shuffle_the_shards_are_read_in_order(dataset):
    in_order = _order(readers.make_dataset(dataset, batch_size=1, shuffle=False))
    assert [(v.encode(), s) for v, s in
            ((e["video_id"], int(e["start"])) for e in read_examples(dataset, "train"))] == in_order


def test_features_parses_only_those_and_refuses_unknown_ones(dataset):
    ds = readers.make_dataset(dataset, batch_size=2, features=["window", "metadata"])
    assert set(ds.element_spec) == {"window", "metadata"}
    with pytest.raises(ValueError, match=r"unknown feature\(s\) \['labels'\]"):
        readers.make_dataset(dataset, features=["window", "labels"])


def test_input_context_shards_files_and_splits_the_batch(dataset):
    spec = readers.load_spec(dataset)
    seen = []
    for pipeline_id in range(2):
        context = tf.distribute.InputContext(num_input_pipelines=2,
                                             input_pipeline_id=pipeline_id,
                                             num_replicas_in_sync=2)
        ds = readers.make_dataset(dataset, batch_size=8, input_context=context,
                                  drop_remainder=False, seed=1)
        assert ds.element_spec["window"].shape.as_list()[0] in (4, None)
        part = _order(ds)
        assert all(len(b["start"]) <= 4 for b in ds)
        seen.append(set(part))
    assert not seen[0] & seen[1]
    assert len(seen[0] | seen[1]) == spec.splits["train"].windows
    too_many = tf.distribute.InputContext(num_input_pipelines=5, input_pipeline_id=0)
    with pytest.raises(ValueError, match="4 shards, fewer than the 5 input pipelines"):
        readers.make_dataset(dataset, input_context=too_many)


def test_errors_name_the_problem(dataset, tmp_path):
    with pytest.raises(FileNotFoundError, match="not a finished dataset"):
        readers.make_dataset(str(tmp_path))
    with pytest.raises(ValueError, match=r"split 'test' is not in .*\['train', 'validation'\]"):
        readers.make_dataset(dataset, split="test")
    for name in ("batch_size", "shuffle_buffer", "cycle_length"):
        with pytest.raises(ValueError, match=f"^{name} must be a whole number >= 1, not -1$"):
            readers.make_dataset(dataset, **{name: -1})
    copy = tmp_path / "copy"
    shutil.copytree(dataset, copy)
    meta = json.loads((copy / "dataset.json").read_text())
    meta["format_version"] = 99
    (copy / "dataset.json").write_text(json.dumps(meta))
    with pytest.raises(ValueError, match="unknown format version 99"):
        readers.load_spec(str(copy))


@pytest.mark.slow
@pytest.mark.parametrize("options, error, says", [
    ({"batch_size": float("nan")}, TypeError, "batch_size must be a whole number >= 1, not nan"),
    ({"batch_size": 2.5}, TypeError, "batch_size must be a whole number >= 1, not 2.5"),
    ({"batch_size": True}, TypeError, "batch_size must be a whole number >= 1, not True"),
    ({"seed": "3"}, TypeError, "seed must be a whole number in [0, 9223372036854775807], "
                               "not '3'"),
    ({"shuffle_buffer": 0}, ValueError, "shuffle_buffer must be a whole number >= 1, not 0"),
    ({"cycle_length": True}, TypeError, "cycle_length must be a whole number >= 1, not True"),
    ({"shuffle": "false"}, TypeError, "shuffle must be True or False, not 'false'"),
    ({"repeat": 1}, TypeError, "repeat must be True or False, not 1"),
    ({"drop_remainder": "no"}, TypeError, "drop_remainder must be True or False, not 'no'"),
    ({"keep_float16": None}, TypeError, "keep_float16 must be True or False, not None"),
])
def test_every_argument_is_checked_when_given_naming_it(dataset, options, error, says):
    with pytest.raises(error, match=f"^{re.escape(says)}$"):
        readers.make_dataset(dataset, **options)


def _seeded(dataset: str) -> dict:
    """Each reader that takes a seed, as a function of the seed."""
    source = WindowSource(dataset, "train")
    return {"make_dataset": lambda seed: readers.make_dataset(dataset, batch_size=4, seed=seed),
            "batches": lambda seed: batches(dataset, "train", 4, seed=seed),
            "EpochBatches": lambda seed: EpochBatches(source, 4, seed=seed),
            "Mixture": lambda seed: Mixture([(source, 1)], seed=seed),
            "mix_datasets": lambda seed: readers.mix_datasets([(dataset, 1)], "train", 4,
                                                              seed=seed),
            "Clip": lambda seed: Clip(2, seed=seed)}


@pytest.mark.parametrize("seed", [-1, 2 ** 63])
def test_a_seed_out_of_range_is_refused_in_the_same_words_by_every_reader(dataset, seed):
    """make_dataset took any int64 (-1 too), batches, EpochBatches and the mixtures any
    whole number >= 0 (2**63 too, which tf.data cannot take), a Clip one below 2**32:
    a seed that one reader took, another refused."""
    for name, reader in _seeded(dataset).items():
        with pytest.raises(ValueError) as refused:
            reader(seed)
        assert str(refused.value).removeprefix("Clip ") == (
            f"seed must be a whole number in [0, 9223372036854775807], not {seed}"), name


def test_every_reader_reads_with_the_largest_seed_and_none_below_it_alike(dataset):
    """2**63 - 1, the largest, reads; a clip's seeds 2**32 apart (once the same clips,
    so refused past 2**32) give other clips."""
    for seed in (0, 2 ** 63 - 1):
        made = _seeded(dataset)
        assert next(iter(made["make_dataset"](seed)))["window"].shape[0] == 4
        assert next(iter(made["batches"](seed)))["window"].shape[0] == 4
        assert len(list(made["EpochBatches"](seed))) == len(list(made["EpochBatches"](0)))
        assert next(iter(made["mix_datasets"](seed)))["source"].shape == (4,)
        assert len(made["Mixture"](seed)) == len(WindowSource(dataset, "train"))
    offsets = {seed: Clip(2, seed=seed).offsets(8, np.arange(64), epoch=0)
               for seed in (5, 5 + 2 ** 32, 2 ** 63 - 1)}
    assert len({tuple(o) for o in offsets.values()}) == 3


def test_numpy_integers_are_taken_as_the_numbers_they_hold(dataset):
    ds = readers.make_dataset(dataset, batch_size=np.uint8(4), seed=np.int64(1),
                              shuffle_buffer=np.int16(8), cycle_length=np.uint32(2))
    assert ds.element_spec["window"].shape[0] == 4
    again = readers.make_dataset(dataset, batch_size=4, seed=1, shuffle_buffer=8,
                                 cycle_length=2)
    np.testing.assert_array_equal(np.concatenate([b["start"] for b in ds.as_numpy_iterator()]),
                                  np.concatenate([b["start"] for b in again.as_numpy_iterator()]))


def test_float16_and_gzip_datasets_read_back(tmp_path, rng):
    videos = [(f.astype(np.float16), r) for f, r in random_videos(rng, 4, lengths=(16, 17))]
    write_videos(str(tmp_path / "in"), videos, files=1)
    run_job(str(tmp_path / "in" / "*"), tmp_path / "out", "--window", "8",
            "--compression", "gzip")
    assert next(iter(readers.make_dataset(str(tmp_path / "out"), batch_size=8)))[
        "window"].dtype == tf.float32
    batch = next(iter(readers.make_dataset(str(tmp_path / "out"), batch_size=8, seed=0,
                                           keep_float16=True)))
    assert batch["window"].dtype == tf.float16 and batch["window"].shape == (8, 8, 3)
    by_id = {f"lat-0.tfrecord:{i}": f for i, (f, _) in enumerate(videos)}
    for vid, start, window in zip(batch["video_id"].numpy(), batch["start"].numpy(),
                                  batch["window"].numpy(), strict=True):
        np.testing.assert_array_equal(window, by_id[vid.decode()][start:start + 8])


@pytest.mark.slow
def test_batches_mix_videos_like_uniform_sampling(tmp_path, rng):
    """Adjacent windows of a video must not cluster: compare with sampling at random."""
    write_videos(str(tmp_path / "in"), random_videos(rng, 40, lengths=(100, 101), dim=1),
                 files=4)
    run_job(str(tmp_path / "in" / "*"), tmp_path / "out", "--window", "10", "--stride", "5",
            "--num_shards", "4")
    # Five seeded epochs: one unseeded epoch has only 23 batches, and its mean moved past 5%
    # of the uniform figure by chance about once in a few hundred runs.
    ids = [b["video_id"].numpy() for seed in range(5) for b in
           readers.make_dataset(str(tmp_path / "out"), batch_size=32, features=["video_id"],
                                seed=seed)]
    distinct = np.mean([len(set(b)) for b in ids])
    population = np.concatenate(ids)
    uniform = np.mean([len(set(rng.choice(population, 32, replace=False))) for _ in range(500)])
    assert distinct >= 0.95 * uniform, (distinct, uniform)


@pytest.mark.slow
def test_import_readers_does_not_import_beam():
    code = "import sys, readers; readers.make_dataset; print('apache_beam' in sys.modules)"
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert result.stdout.strip() == "False", result.stderr


# After the reader's set-up (argv[1], code), three 5 MB blocks, as a trainer's batches come
# and go: touched, freed, taken again.
_FAULTS_PER_PAGE = """
import ctypes, resource, sys
exec(sys.argv[1])
libc = ctypes.CDLL(None)
libc.malloc.restype, libc.free.argtypes = ctypes.c_void_p, [ctypes.c_void_p]
size, rounds = 5 << 20, 4
for round in range(rounds + 1):
    if round == 1:
        start = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    blocks = [libc.malloc(size) for _ in range(3)]
    for block in blocks:
        ctypes.memset(block, 1, size)
    for block in blocks:
        libc.free(block)
faults = resource.getrusage(resource.RUSAGE_SELF).ru_minflt - start
print(faults / (rounds * 3 * size / 4096))
"""


@pytest.mark.slow
@pytest.mark.skipif(platform.libc_ver()[0] != "glibc", reason="tunes glibc's malloc only")
@pytest.mark.parametrize("env, kept", [({}, True), ({"READERS_TUNE_MALLOC": "0"}, False),
                                       ({"GLIBC_TUNABLES": "glibc.malloc.arena_max=8"}, False)])
def test_make_dataset_keeps_freed_batch_memory_unless_the_user_chose(dataset, env, kept):
    """Without it, every batch's block comes back from the kernel as fresh pages.
    make_dataset sets it (the first case); whether a user's choice stops it is decided
    where it is set (readers/tfdata/malloc.py), tested there without TensorFlow's start-up."""
    setup = (f"import readers; readers.make_dataset({dataset!r}, batch_size=2)" if not env
             else "from readers.tfdata import malloc; malloc.keep_freed_memory()")
    result = subprocess.run([sys.executable, "-c", _FAULTS_PER_PAGE, setup],
                            capture_output=True, text=True, env={**os.environ, **env})
    assert result.returncode == 0, result.stderr
    faults_per_page = float(result.stdout.strip().splitlines()[-1])
    assert (faults_per_page < 0.01) if kept else (faults_per_page > 0.5), result.stderr


@pytest.mark.slow
def test_the_reader_names_a_corrupt_or_short_shard(tmp_path):
    import tensorflow as tf

    write_records(str(tmp_path / "in" / "a.tfrecord"),
                  [latent_example(np.full((12, 2), i, np.float32), [i, 0]) for i in range(10)])
    run_job(str(tmp_path / "in" / "*"), tmp_path / "out", "--window", "4", "--num_shards", "2")
    shard = read_dataset_json(tmp_path / "out")["splits"]["train"]["shards"][1]["file"]
    path = tmp_path / "out" / shard
    good = path.read_bytes()
    last_record_starts = index_offsets(f"{path}.index")[-2]
    flipped = bytearray(good)
    flipped[len(good) // 2] ^= 0xFF
    for broken in (bytes(flipped), good[:last_record_starts]):   # corrupt; short, cut cleanly
        path.write_bytes(broken)
        for shuffle in (True, False):
            with pytest.raises(tf.errors.InvalidArgumentError,
                               match=f"No more readable records in shard .*{shard}"):
                for _ in readers.make_dataset(str(tmp_path / "out"), batch_size=2,
                                              shuffle=shuffle, drop_remainder=False):
                    pass


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["latent", "float16", "long", "png", "jpeg"])
def test_window_source_gives_the_tf_readers_values(kinds, kind):
    """readers.numpy (tests/readers_only/) gives each window as the tf.data reader does:
    the same values and dtypes."""
    path = kinds[kind]
    source = WindowSource(path, "train")
    assert len(source) == readers.load_spec(path).splits["train"].windows
    ours = windows_by_key([{k: np.array([v]) if not isinstance(v, bytes) else [v]
                     for k, v in source[i].items()} for i in range(len(source))])
    theirs = windows_by_key(readers.make_dataset(path, batch_size=1, shuffle=False))
    assert ours.keys() == theirs.keys()
    for key, values in ours.items():
        for name, value in values.items():
            np.testing.assert_array_equal(value, theirs[key][name], err_msg=f"{kind} {name}")
            if isinstance(value, np.ndarray):
                assert value.dtype == theirs[key][name].dtype, name
    floats = WindowSource(path, "train", float_pixels=True)[0]["window"]
    assert floats.dtype == (np.float32 if kind != "float16" else np.float32)


@pytest.mark.slow
def test_records_of_one_size_in_several_layouts_read_right_in_any_order(kinds):
    path = kinds["long"]
    theirs = windows_by_key(readers.make_dataset(path, batch_size=1, shuffle=False))
    layouts = collections.defaultdict(set)     # size -> (id length, start varint length)
    for vid, start in theirs:
        layouts[len(vid) + (start >= 128)].add(len(vid))
    assert max(map(len, layouts.values())) > 1
    for seed in range(2):
        assert_same_windows(windows_by_key(batches(path, "train", 7, seed=seed,
                                                   drop_remainder=False)), theirs)
