"""readers.numpy: random access through the shard index, without TensorFlow or Beam, its
arguments checked, corrupt records named, and the PyTorch and Grain adapters (its values
against the tf.data reader's: tests/test_reader.py)."""
import argparse
import json
import os
import pickle
import re
import shutil
import subprocess
import sys

import numpy as np
import pytest
from helpers import (
    assert_same_windows,
    assert_verified,
    docs_code,
    index_offsets,
    read_dataset_json,
    windows_by_key,
    write_index,
)

from readers import arguments
from readers.clips import Clip
from readers.format import numbers
from readers.format.tfrecord import frame
from readers.format.wire import read_varint
from readers.numpy import BatchSource, EpochBatches, Select, WindowSource, batches, epoch_order


def test_every_uncompressed_shard_has_an_index_that_verify_checks(datasets, tmp_path):
    meta = read_dataset_json(datasets["latent"])
    for split in meta["splits"].values():
        for shard in split["shards"]:
            assert shard["index"] == shard["file"] + ".index" and shard["index"] in meta["files"]
            offsets = index_offsets(os.path.join(datasets["latent"], shard["index"]))
            assert len(offsets) == shard["examples"] + 1
            assert offsets[-1] == os.path.getsize(os.path.join(datasets["latent"], shard["file"]))
    gzip = read_dataset_json(datasets["gzip"])
    assert all(s["index"] is None for s in gzip["splits"]["train"]["shards"])

    import shutil
    copy = tmp_path / "copy"
    shutil.copytree(datasets["latent"], copy)
    index = copy / meta["splits"]["train"]["shards"][0]["index"]
    offsets = index_offsets(index)
    offsets[1] += 8
    write_index(index, offsets)
    result = subprocess.run([sys.executable, "-m", "readers.inspect", str(copy), "--verify"],
                            capture_output=True, text=True)
    assert result.returncode == 1 and "record 0 at byte 0 does not match" in result.stderr


def _entries_reversed(example: bytes) -> bytes:
    """The same Example with its map entries in the opposite order (as another writer
    may put them): same size, every feature somewhere else."""
    _, first = read_varint(example, 1)            # Example.features: tag 0x0A, length
    entries, pos = [], first
    while pos < len(example):                       # Features.feature entries: 0x0A, length
        length, at = read_varint(example, pos + 1)
        entries.append(example[pos:at + length])
        pos = at + length
    return example[:first] + b"".join(reversed(entries))


def test_a_dataset_of_format_version_2_with_its_binary_index_still_reads(datasets, tmp_path):
    """Before format version 3 the index was binary (uint64 offsets, then the shard's
    length) under the same name, and there were no TFDS files; dataset.json's version
    says which index a reader reads."""
    copy = tmp_path / "copy"
    shutil.copytree(datasets["latent"], copy)
    meta = read_dataset_json(copy)
    meta["format_version"] = 2
    for kind in ("videos", "failures", "bad_frames"):   # plain names before version 5
        meta.pop(f"{kind}_file", None)
    for name in ("dataset_info.json",):
        meta["files"].remove(name)
        (copy / name).unlink()
    (copy / "dataset.json").write_text(json.dumps(meta))
    text_index = copy / meta["splits"]["train"]["shards"][0]["index"]
    with pytest.raises(ValueError, match=f"^{text_index.name}: .*(bytes|records indexed)"):
        WindowSource(str(copy), "train").read_batch([0])    # the text is no binary index
    for split in meta["splits"].values():
        for shard in split["shards"]:
            index = copy / shard["index"]
            index.write_bytes(np.array(index_offsets(index), "<u8").tobytes())
    assert_verified(copy)
    for split in meta["splits"]:
        old, new = WindowSource(str(copy), split), WindowSource(datasets["latent"], split)
        everything = range(len(new))
        assert_same_windows(windows_by_key([old.read_batch(everything)]),
                            windows_by_key([new.read_batch(everything)]))


def test_a_shard_whose_records_order_their_features_otherwise_reads_right(datasets, tmp_path):
    copy = tmp_path / "copy"
    shutil.copytree(datasets["latent"], copy)
    original = WindowSource(datasets["latent"], "train")
    shard = read_dataset_json(copy)["splits"]["train"]["shards"][0]
    offsets = index_offsets(copy / shard["index"])
    data = (copy / shard["file"]).read_bytes()
    records = [data[a + 12:b - 4] for a, b in zip(offsets, offsets[1:], strict=False)]
    with open(copy / shard["file"], "wb") as f:
        for i, record in enumerate(records):
            f.write(frame(_entries_reversed(record) if i % 2 else record))
    assert_verified(copy)
    everything = range(len(original))
    for source in (WindowSource(str(copy), "train"),) * 2:   # learning, then learnt
        assert_same_windows(windows_by_key([source.read_batch(everything)]),
                            windows_by_key([original.read_batch(everything)]))


def test_a_corrupt_record_is_named_whichever_way_it_is_read(datasets, tmp_path):
    copy = tmp_path / "copy"
    shutil.copytree(datasets["latent"], copy)
    shard = read_dataset_json(copy)["splits"]["train"]["shards"][0]
    offsets = index_offsets(copy / shard["index"])
    learnt = WindowSource(str(copy), "train")
    learnt.read_batch(range(len(learnt)))
    with open(copy / shard["file"], "r+b") as f:     # a byte of record 3's window values
        f.seek(int(offsets[4]) - 4 - 5)                 # (the last feature: keys are sorted)
        byte = f.read(1)
        f.seek(-1, os.SEEK_CUR)
        f.write(bytes([byte[0] ^ 0x10]))
    message = rf"shard {shard['file']} is corrupt at record 3 .*readers.inspect"
    for source in (learnt, WindowSource(str(copy), "train")):
        with pytest.raises(OSError, match=message):
            source.read_batch(range(len(source)))
        with pytest.raises(OSError, match=message):
            source[3]
        assert source[2]["window"].shape == (4, 3)


@pytest.mark.parametrize("garbage", [b"\xff", b"N"])
def test_a_record_that_is_no_example_is_named(datasets, tmp_path, garbage):
    copy = tmp_path / "copy"
    shutil.copytree(datasets["latent"], copy)
    shard = read_dataset_json(copy)["splits"]["train"]["shards"][0]
    offsets = index_offsets(copy / shard["index"])
    data = bytearray((copy / shard["file"]).read_bytes())
    a, b = offsets[2], offsets[3]                    # record 2, its CRCs sound
    data[a:b] = frame(garbage * (b - a - 16))
    (copy / shard["file"]).write_bytes(data)
    with pytest.raises(ValueError, match=rf"shard {shard['file']}, record 2: not a tf.train"):
        WindowSource(str(copy), "train").read_batch(range(4))


def test_window_source_refuses_what_it_cannot_do(datasets):
    with pytest.raises(ValueError, match="random access needs uncompressed shards"):
        WindowSource(datasets["gzip"])
    with pytest.raises(ValueError, match=r"unknown feature\(s\) \['nope'\]"):
        WindowSource(datasets["latent"], features=["window", "nope"])
    with pytest.raises(IndexError):
        WindowSource(datasets["latent"])[10_000]


def test_indices_mean_what_they_mean_to_numpy_or_are_refused(datasets):
    source = WindowSource(datasets["latent"], "train")
    size = len(source)
    everything = source.read_batch(np.arange(size))["window"]

    def read(selector):
        return source.read_batch(selector)["window"]

    mask = np.zeros(size, bool)
    mask[[1, 3]] = True
    np.testing.assert_array_equal(read(mask), everything[[1, 3]])   # not rows 0 and 1
    np.testing.assert_array_equal(read(list(mask)), everything[[1, 3]])
    np.testing.assert_array_equal(read(slice(1, None, 2)), everything[1::2])
    np.testing.assert_array_equal(read([-1, 0]), everything[[-1, 0]])
    np.testing.assert_array_equal(source[-1]["window"], everything[-1])
    np.testing.assert_array_equal(source[mask]["window"], everything[[1, 3]])
    assert read([]).shape == (0, *everything.shape[1:])
    for wrong, error in (([0.0, 1.0], TypeError), (True, TypeError), ([[0, 1]], TypeError),
                         (mask[:-1], IndexError), ([size], IndexError), ([-size - 1], IndexError),
                         (["0"], TypeError)):
        with pytest.raises(error):
            source.read_batch(wrong)


@pytest.mark.parametrize("options, error, says", [
    ({"order": "stream", "buffer_bytes": float("nan")}, TypeError,
     "buffer_bytes must be a whole number >= 1, not nan"),
    ({"order": "stream", "buffer_bytes": float("inf")}, TypeError,
     "buffer_bytes must be a whole number >= 1, not inf"),
    ({"order": "stream", "buffer_bytes": True}, TypeError,
     "buffer_bytes must be a whole number >= 1, not True"),
    ({"order": "stream", "buffer_bytes": 2.5}, TypeError,
     "buffer_bytes must be a whole number >= 1, not 2.5"),
    ({"start_step": True}, TypeError, "start_step must be a whole number >= 0, not True"),
    ({"threads": 0}, ValueError, "threads must be a whole number >= 1, not 0"),
    ({"batch_size": float("nan")}, TypeError, "batch_size must be a whole number >= 1, not nan"),
    ({"num_shards": 0}, ValueError, "num_shards must be a whole number >= 1, not 0"),
    ({"num_shards": 2, "shard_index": 2}, ValueError,
     "shard_index must be a whole number in [0, 1], not 2"),
    ({"seed": -1}, ValueError, "seed must be a whole number in [0, 9223372036854775807], not -1"),
    ({"seed": 1.0}, TypeError, "seed must be a whole number in [0, 9223372036854775807], not 1.0"),
    ({"epoch": np.float64(1)}, TypeError, "epoch must be a whole number >= 0, not "
                                          f"{np.float64(1)!r}"),
    ({"prefetch": -1}, ValueError, "prefetch must be a whole number >= 0, not -1"),
    ({"shuffle": "false"}, TypeError, "shuffle must be True or False, not 'false'"),
    ({"drop_remainder": 0}, TypeError, "drop_remainder must be True or False, not 0"),
    ({"float_pixels": "yes"}, TypeError, "float_pixels must be True or False, not 'yes'"),
])
def test_every_argument_of_batches_is_checked_when_called_naming_it(datasets, options, error,
                                                                     says):
    """NaN, inf, 2.5 and True slipped through, or failed later under another name
    (ThreadPoolExecutor's max_workers, shard_index for num_shards=0)."""
    with pytest.raises(error, match=f"^{re.escape(says)}$"):
        batches(datasets["latent"], "train", **{"batch_size": 2, **options})


def test_numpy_integers_are_taken_as_the_numbers_they_hold(datasets):
    ours = list(batches(datasets["latent"], "train", np.uint8(3), seed=np.uint8(4),
                        epoch=np.int32(1), num_shards=np.int8(2), shard_index=np.uint64(1),
                        start_step=np.int16(1), threads=np.int64(2), prefetch=np.uint8(1)))
    theirs = list(batches(datasets["latent"], "train", 3, seed=4, epoch=1, num_shards=2,
                          shard_index=1, start_step=1))
    assert len(ours) == len(theirs) > 1
    for mine, other in zip(ours, theirs, strict=True):
        np.testing.assert_array_equal(mine["window"], other["window"])


def test_one_whole_number_check_serves_the_readers_and_the_command_lines():
    """The readers' whole_number is readers/format/numbers.py's, and the command lines'
    argparse type (the job's flags, the sample, readers.inspect) says the same words."""
    assert arguments.whole_number is numbers.whole_number
    with pytest.raises(ValueError, match=r"^batch_size must be a whole number >= 1, not 0$"):
        numbers.whole_number("batch_size", 0, 1)
    parse = numbers.whole_number_type(1, 100)
    assert parse("7") == 7 and type(parse("7")) is int
    with pytest.raises(argparse.ArgumentTypeError,
                       match=r"^must be a whole number in \[1, 100\], got 0$"):
        parse("0")
    with pytest.raises(argparse.ArgumentTypeError, match="^expected an integer, got '2.5'$"):
        parse("2.5")


def test_readers_numpy_imports_neither_tensorflow_nor_beam(datasets):
    code = ("import sys\nfrom readers.numpy import batches, WindowSource\n"
            f"b = next(batches({datasets['png']!r}, 'train', 2))\n"
            f"s = WindowSource({datasets['latent']!r}, 'test')[0]\n"
            "print(b['window'].shape, 'tensorflow' in sys.modules, 'apache_beam' in sys.modules)")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert result.stdout.split() == ["(2,", "4,", "24,", "32,", "3)", "False", "False"], \
        result.stderr[-2000:]


def test_a_source_pickles_and_reads_in_another_process(datasets):
    source = WindowSource(datasets["latent"], "train")
    first = source[3]
    clone = pickle.loads(pickle.dumps(source))
    np.testing.assert_array_equal(clone[3]["window"], first["window"])


def test_the_order_is_a_pure_function_of_seed_and_epoch_cut_per_host():
    a = epoch_order(100, shuffle=True, seed=1, epoch=2, shard_index=0, num_shards=1)
    assert np.array_equal(a, epoch_order(100, shuffle=True, seed=1, epoch=2, shard_index=0,
                                         num_shards=1))
    assert not np.array_equal(a, epoch_order(100, shuffle=True, seed=1, epoch=3,
                                             shard_index=0, num_shards=1))
    hosts = [epoch_order(100, shuffle=True, seed=1, epoch=2, shard_index=k, num_shards=3)
             for k in range(3)]
    assert all(len(h) == 33 for h in hosts)
    assert len(set(np.concatenate(hosts))) == 99      # disjoint; one left over
    assert np.array_equal(np.concatenate(hosts), a[:99])


@pytest.mark.parametrize("cache", ["simplecache", "filecache"])
def test_fsspec_cached_urls_read_the_index_and_the_shards(datasets, cache):
    """fsspec's local caches chain onto any URL; the reader hands each file to the cache
    by its inner path (it gave the whole chained URL, and the shards seemed missing)."""
    path = datasets["png"]
    url = f"{cache}::file://{path}"
    plain, cached = WindowSource(path, "train"), WindowSource(url, "train")
    assert len(cached) == len(plain)
    rows = list(range(len(plain)))
    for name, column in plain.read_batch(rows).items():
        np.testing.assert_array_equal(cached.read_batch(rows)[name], column)
    first = next(batches(url, "train", 2, seed=3))
    np.testing.assert_array_equal(first["window"],
                                  next(batches(path, "train", 2, seed=3))["window"])


def test_getitems_gives_the_rows_of_read_batch(datasets):
    source = WindowSource(datasets["latent"], "train")
    indices = [3, 0, len(source) - 1, 3, -2]
    batch = source.read_batch(indices)
    windows = source.__getitems__(indices)
    assert len(windows) == len(indices)
    for row, window in enumerate(windows):
        assert window.keys() == batch.keys()
        for name, column in batch.items():
            assert np.shape(window[name]) == column.shape[1:], name
            np.testing.assert_array_equal(window[name], column[row], err_msg=name)
    assert source.__getitems__([]) == []


def test_a_plan_reads_a_source_through_its_public_surface(datasets):
    """What EpochBatches and batches() read a WindowSource by (docs/readers.md, PyTorch):
    the split's numbers of its selected windows, a read by those numbers (the transform
    applied), its shards, and the error for a plan of no batch."""
    whole = WindowSource(datasets["latent"], "train")
    assert whole.selected is None and whole.shards.size == len(whole)
    assert whole.in_split(np.array([2, 0])).tolist() == [2, 0]
    first = whole.read_batch([0])["video_id"][0].decode()
    source = WindowSource(datasets["latent"], "train", select=Select(exclude_videos=[first]),
                          transform=lambda batch: {**batch, "rows": len(batch["video_id"])})
    selected = source.selected
    assert len(selected) == len(source) < len(whole) and 0 not in selected.tolist()
    indices = np.array([len(source) - 1, 0])
    assert source.in_split(indices).tolist() == selected[indices].tolist()
    batch = source.read_split_windows(source.in_split(indices))
    expected = whole.read_batch(selected[indices])
    assert batch["rows"] == 2 and batch.keys() - {"rows"} == expected.keys()
    for name, column in expected.items():
        np.testing.assert_array_equal(batch[name], column, err_msg=name)
    error = source.no_batch_error(3, 4, holder="gives this host")
    assert isinstance(error, ValueError) and str(error).startswith(
        f"split 'train' of {datasets['latent']} gives this host 3 windows, fewer than "
        "batch_size 4")


def test_video_id_is_a_numpy_bytes_array_in_every_numpy_path(datasets):
    """`video_id` is numpy bytes (`S`): an array in a batch, its item for one window."""
    path = datasets["latent"]
    source = WindowSource(path, "train")
    assert type(source[0]["video_id"]) is np.bytes_
    assert type(source.__getitems__([0, 1])[1]["video_id"]) is np.bytes_
    for batch in (source.read_batch([0, 1]), source[[0, 1]], next(batches(path, "train", 2))):
        assert batch["video_id"].dtype.kind == "S" and batch["video_id"].shape == (2,)
    assert source[[0, 1]]["video_id"].tolist() == [source[0]["video_id"], source[1]["video_id"]]


def test_pytorch_dataloader_workers_read_every_window_once(datasets):
    """The README's DataLoader: a BatchSampler's batches of indices, each read by a worker
    as one read_batch (`batch_size=None`); numbers come as tensors, video_id as `S`."""
    torch = pytest.importorskip("torch")
    source = WindowSource(datasets["latent"], "train")
    sampler = torch.utils.data.BatchSampler(
        torch.utils.data.RandomSampler(source, generator=torch.Generator().manual_seed(0)),
        batch_size=4, drop_last=False)
    loader = torch.utils.data.DataLoader(source, sampler=sampler, batch_size=None,
                                         num_workers=2,
                                         multiprocessing_context="forkserver")
    seen = []
    for batch in loader:
        assert batch["window"].dtype == torch.float32 and batch["window"].shape[1:] == (4, 3)
        assert batch["video_id"].dtype.kind == "S"
        seen += [(v, int(s)) for v, s in zip(batch["video_id"], batch["start"], strict=True)]
    assert len(seen) == len(set(seen)) == len(source)


def test_pytorch_default_collate_reads_a_batch_with_getitems(datasets):
    """A DataLoader with a batch_size reads each batch through __getitems__ too; its
    default collate makes video_id a list of bytes."""
    torch = pytest.importorskip("torch")
    source = WindowSource(datasets["latent"], "train")
    loader = torch.utils.data.DataLoader(source, batch_size=4, shuffle=True, num_workers=2,
                                         generator=torch.Generator().manual_seed(0),
                                         multiprocessing_context="forkserver")
    seen = []
    for batch in loader:
        assert batch["window"].dtype == torch.float32 and batch["window"].shape[1:] == (4, 3)
        seen += [(bytes(v), int(s)) for v, s in zip(batch["video_id"], batch["start"], strict=True)]
    assert len(seen) == len(set(seen)) == len(source)


@pytest.mark.slow
def test_grain_reads_a_window_source(datasets):
    grain = pytest.importorskip("grain.python")
    source = WindowSource(datasets["latent"], "train")
    loader = grain.DataLoader(
        data_source=source,
        sampler=grain.IndexSampler(len(source), grain.NoSharding(), shuffle=True, seed=0,
                                   num_epochs=1),
        operations=[grain.Batch(4, drop_remainder=False)], worker_count=2)
    seen = []
    for batch in loader:
        assert batch["video_id"].dtype.kind == "S" and batch["window"].dtype == np.float32
        seen += [(v, int(s)) for v, s in zip(batch["video_id"], batch["start"], strict=True)]
    assert len(seen) == len(set(seen)) == len(source)


@pytest.mark.slow
def test_grain_reads_each_epoch_with_its_own_clips_as_the_docs_show(datasets):
    """docs/readers.md's Grain loop, a loader per epoch over `source.for_epoch(epoch)`
    (two workers): each epoch reads every window once, with that epoch's clips (one
    loader over 3 epochs gave every epoch the first's: Grain hands a source the window's
    number, never the epoch)."""
    pytest.importorskip("grain.python")
    docs = {"__name__": "grain_docs"}          # its `__main__` part does not run
    exec(docs_code("readers.md", "Grain and JAX"), docs)
    source = WindowSource(datasets["latent"], "train", clip=Clip(2))
    epochs = []
    for epoch in (0, 1):
        read = {}
        for batch in docs["epoch_loader"](source, epoch, batch_size=1):
            read.update(_clips_by_window(batch))
        assert read == _clips_by_window(source.for_epoch(epoch)[:])
        epochs.append(read)
    assert epochs[0] != epochs[1]


@pytest.mark.slow
def test_grain_reads_a_plans_batches_as_the_docs_show(datasets):
    """docs/readers.md's Grain loop over a plan's batches (BatchSource, two workers):
    every batch of the plan, in order, each read whole; an item past the plan is an
    IndexError, and the repr names the plan's state (Grain's checkpoints compare it)."""
    pytest.importorskip("grain.python")
    docs = {"__name__": "grain_docs"}          # its `__main__` part does not run
    exec(docs_code("readers.md", "Grain and JAX", 1), docs)
    source = WindowSource(datasets["latent"], "train", clip=Clip(2))
    plan = EpochBatches(source, 3, seed=4, epoch=1, start_step=2)
    assert len(plan) > 1
    expected = iter(plan)
    for batch in docs["plan_loader"](plan):   # each compared, then freed: Grain unlinks
        should = plan.source.read_batch(next(expected))   # its memory when its loader ends
        assert list(batch) == list(should)
        for key, value in should.items():
            np.testing.assert_array_equal(batch[key], value, err_msg=key)
        del batch
    assert next(expected, None) is None
    source_of_batches = BatchSource(plan)
    with pytest.raises(IndexError, match=f"item {len(plan)} of a plan of {len(plan)}"):
        source_of_batches[len(plan)]
    assert repr(source_of_batches) == f"BatchSource({plan.state(2)!r})"


def _clips_by_window(batch) -> dict:
    """(video_id, start) -> clip_offset, of each window of a batch."""
    return {(video, int(start)): int(offset) for video, start, offset in
            zip(batch["video_id"], batch["start"], batch["clip_offset"], strict=True)}


@pytest.mark.slow
def test_the_gpu_feed_benchmark_trains_from_the_reader_on_cpu(datasets, tmp_path):
    """benchmarks/bench_gpu_feed.py, which no test machine can run on a GPU, at least
    runs: its model trains on batches from DataLoader workers over WindowSource."""
    pytest.importorskip("torch")
    sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "benchmarks"))
    from bench_gpu_feed import main

    result = main([datasets["latent"], "--json", str(tmp_path / "feed.json"), "--device",
                   "cpu", "--workers", "2", "--batch_size", "4", "--d_model", "16",
                   "--layers", "1", "--steps", "3", "--warmup", "1", "--repeats", "2"])
    assert json.loads((tmp_path / "feed.json").read_text()) == result
    assert [len(rates) for rates in result["runs"].values()] == [2, 2]
    assert all(rate > 0 for rates in result["runs"].values() for rate in rates)
