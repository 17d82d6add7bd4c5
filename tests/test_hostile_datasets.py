"""Hostile files planted in a real dataset built by the job, and a real rewrite under open
readers: every reader and `readers.inspect --verify` refuse with one clear line, allocate
nothing that the files could not hold, and never return windows of two runs."""
import concurrent.futures
import json
import multiprocessing
import os
import re
import shutil
import subprocess
import sys
import tracemalloc

import numpy as np
import pytest
import tensorflow as tf
from helpers import read_dataset_json, read_examples, run_job
from input_files import random_videos, write_videos

import readers
from readers.file_checks import DatasetChanged
from readers.format import SpecError
from readers.inspect.verify import verify
from readers.numpy import WindowSource, batches


def _build(root, *extra) -> str:
    """A small latent dataset of four shards, each with its index."""
    write_videos(str(root / "in"), random_videos(np.random.default_rng(5), 8, lengths=(20, 30)))
    run_job(str(root / "in" / "*"), root / "out", "--window", "4", "--stride", "2",
            "--num_shards", "4", *extra)
    return str(root / "out")


@pytest.fixture(scope="module")
def dataset(tmp_path_factory):
    return _build(tmp_path_factory.mktemp("hostile"))


def _copy(dataset, tmp_path, change=None) -> str:
    """A copy of `dataset` whose dataset.json `change` edits in place."""
    copy = tmp_path / "copy"
    shutil.copytree(dataset, copy)
    if change:
        meta = read_dataset_json(copy)
        change(meta, copy)
        (copy / "dataset.json").write_text(json.dumps(meta))
    return str(copy)


def _inspect(*args) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "readers.inspect", *args],
                          capture_output=True, text=True)


def _refused_in_one_line(path, needle, code=None) -> None:
    """`readers.inspect PATH --verify` fails (`code`, when given) with one line holding
    `needle`, and no traceback."""
    result = _inspect(path, "--verify")
    assert result.returncode != 0 and (code is None or result.returncode == code), (
        result.returncode, result.stdout, result.stderr)
    assert "Traceback" not in result.stderr and needle in result.stderr, result.stderr


def _shard(meta, i=1) -> dict:
    return meta["splits"]["train"]["shards"][i]


def _outside_shard(meta, copy):
    """Shard 1 moved out of the directory, and dataset.json pointing at it there."""
    os.makedirs(copy.parent / "outside")
    name = _shard(meta)["file"]
    shutil.move(str(copy / name), str(copy.parent / "outside" / name))
    _shard(meta)["file"] = f"../outside/{name}"
    _shard(meta)["index"] = f"../outside/{name}.index"
    shutil.move(str(copy / f"{name}.index"), str(copy.parent / "outside" / f"{name}.index"))


def _absolute_index(meta, copy):
    name = _shard(meta)["index"]
    shutil.move(str(copy / name), str(copy.parent / name))
    _shard(meta)["index"] = str(copy.parent / name)


def _listed_outside(meta, copy):
    meta["files"].append("../outside/train-00001-of-00004.tfrecord")


@pytest.mark.parametrize("plant, field", [(_outside_shard, "shards[1].file"),
                                          (_absolute_index, "shards[1].index"),
                                          (_listed_outside, "files[")])
def test_a_name_that_leaves_the_directory_is_refused_by_every_reader(dataset, tmp_path,
                                                                     plant, field):
    copy = _copy(dataset, tmp_path, plant)
    with pytest.raises(SpecError, match=f"dataset.json: .*{re.escape(field)}.* is not the plain "
                                        "name"):
        WindowSource(copy)
    with pytest.raises(SpecError, match=f"{re.escape(field)}.* is not the plain name"):
        readers.make_dataset(copy, batch_size=2)
    _refused_in_one_line(copy, "is not the plain name", code=2)


@pytest.mark.parametrize("shape, dtype, needle", [
    ([4, 10**10], "float32", "more than a tf.train.Example can hold"),    # was a segfault
    ([4, 10**7], "float32", "bytes cannot hold its"),     # fits a protobuf, not the shards
    ([4, 3], "complex64", "dtype 'complex64' is not stored as float"),
])
def test_shapes_and_dtypes_are_checked_before_anything_is_allocated(dataset, tmp_path, shape,
                                                                    dtype, needle):
    def claim(meta, copy):
        meta["features"][0].update(shape=shape, dtype=dtype)
        meta.pop("stats")   # else their channels, 3 a frame, refuse the shape first
    copy = _copy(dataset, tmp_path, claim)
    tracemalloc.start()
    try:
        with pytest.raises(SpecError, match=needle):
            WindowSource(copy).read_batch([0])
        with pytest.raises(SpecError, match=needle):
            readers.make_dataset(copy, batch_size=2)
        assert tracemalloc.get_traced_memory()[1] < 64 << 20
    finally:
        tracemalloc.stop()
    _refused_in_one_line(copy, needle)


def _index_with(change):
    """Plant a text index of shard 1 whose lines, [offset, length] each, `change` edits
    (it may return the index's new text instead)."""
    def plant(meta, copy):
        path = copy / _shard(meta)["index"]
        lines = [line.split() for line in path.read_text().splitlines()]
        text = change(lines)
        path.write_text(text if text is not None else
                        "".join(f"{offset} {length}\n" for offset, length in lines))
    return plant


def _far(lines):
    """Every frame from record 2 on 3 GB further on: lines that agree with each other."""
    lines[1][1] = int(lines[1][1]) + 3_000_000_000
    for line in lines[2:]:
        line[0] = int(line[0]) + 3_000_000_000


def _huge(lines):
    lines[1][1] = 2**63


def _swapped(lines):
    lines[1], lines[2] = lines[2], lines[1]


def _empty(lines):
    """Record 1 of no bytes, record 2 spanning both: lines that agree with each other."""
    lines[2] = [lines[1][0], int(lines[1][1]) + int(lines[2][1])]
    lines[1][1] = 0


def _letter(lines):
    lines[1][0] = lines[1][0] + "x"


def _line_short(lines):
    del lines[-1]


def _mile_long(lines):
    return "1" * (64 << 20)


@pytest.mark.parametrize("change, needle", [
    (_far, "ends at byte"), (_huge, "line 2: '"), (_swapped, "line 1: the frame at byte 0"),
    (_empty, "record 1 spans bytes"), (_letter, "line 2: '"),
    (_line_short, "records indexed, dataset.json says"),
    (_mile_long, "bytes, where its entry in dataset.json allows")])
def test_a_crafted_index_is_refused_naming_its_shard_and_line(dataset, tmp_path, change,
                                                              needle):
    copy = _copy(dataset, tmp_path, _index_with(change))
    meta = read_dataset_json(copy)
    index, first = _shard(meta)["index"], _shard(meta, 0)["examples"]   # shard 1's first
    source = WindowSource(copy)
    tracemalloc.start()
    try:
        with pytest.raises(ValueError,
                           match=f"^{re.escape(index)}: ([\\d,]+ )?{re.escape(needle)}"):
            source.read_batch([first])
        # 64 MB of digits is refused by its size, before a byte of it is read
        assert tracemalloc.get_traced_memory()[1] < 16 << 20
    finally:
        tracemalloc.stop()
    _refused_in_one_line(copy, f"{index}: ")


@pytest.mark.parametrize("splits, window, needle", [
    ([], {"length": 4, "stride": 2, "tail": "align_end"}, "splits: [] is not an object"),
    ({"train": 3}, {"length": 4, "stride": 2, "tail": "align_end"},
     "splits.train: 3 is not an object"),
    (None, None, "window: missing (or null)"),
    (None, {"length": 4, "stride": 2, "tail": "wrap"},
     'window.tail: "wrap" is none of align_end, drop, pad'),
])
def test_a_malformed_dataset_json_is_one_clear_error(dataset, tmp_path, splits, window, needle):
    def malform(meta, copy):
        meta["window"] = window
        if splits is not None:
            meta["splits"] = splits
    copy = _copy(dataset, tmp_path, malform)
    with pytest.raises(SpecError) as error:
        readers.load_spec(copy)
    assert isinstance(error.value, ValueError)
    assert str(error.value) == f"{copy}/dataset.json: {needle}"
    _refused_in_one_line(copy, f"error: {copy}/dataset.json: {needle}", code=2)


@pytest.mark.parametrize("place", ["fifo at an index", "directory at a shard"])
def test_a_fifo_or_a_directory_in_a_files_place_is_one_line_never_a_hang(dataset, tmp_path,
                                                                         place):
    """A FIFO's open waits for a writer forever: the readers look before they open."""
    copy = _copy(dataset, tmp_path)
    shard = _shard(read_dataset_json(copy), 0)
    name = shard["index"] if place.startswith("fifo") else shard["file"]
    os.remove(os.path.join(copy, name))
    if place.startswith("fifo"):
        os.mkfifo(os.path.join(copy, name))
    else:
        os.mkdir(os.path.join(copy, name))
    kind = "a FIFO" if place.startswith("fifo") else "a directory"
    needle = f"{os.path.join(copy, name)}, which dataset.json lists, is {kind}, not a regular file"
    with concurrent.futures.ThreadPoolExecutor(1) as pool:   # a hang fails, not blocks
        with pytest.raises(ValueError, match=re.escape(needle)):
            pool.submit(lambda: WindowSource(copy, "train").read_batch([0])).result(120)
    result = _inspect(copy, "--verify")
    assert result.returncode == 1 and "Traceback" not in result.stderr, result.stderr
    assert needle in result.stdout + result.stderr


def test_a_dataset_json_naming_a_key_twice_is_refused_not_read_last_wins(dataset, tmp_path):
    copy = _copy(dataset, tmp_path, lambda meta, copy: None)
    path = os.path.join(copy, "dataset.json")
    with open(path) as f:
        text = f.read()
    # a second "window" key after the first: json.loads alone would keep the second
    with open(path, "w") as f:
        f.write(text.replace('"window": {', '"window": {"length": 1}, "window": {', 1))
    needle = ('the key "window" appears twice in one object, and a reader cannot tell '
              "which value is meant")
    with pytest.raises(SpecError, match=needle):
        readers.load_spec(copy)
    _refused_in_one_line(copy, f"error: {copy}/dataset.json: {needle}", code=2)


@pytest.mark.slow
def test_a_shard_deleted_before_tf_data_opens_it_is_an_error_not_a_hang(dataset, tmp_path):
    """Locally the check names the dataset; on gs:// (its code path, here on a local file)
    TensorFlow's NotFound comes through. Both hung, retrying the open without end."""
    copy = _copy(dataset, tmp_path)
    shard = os.path.join(copy, _shard(read_dataset_json(copy), 2)["file"])
    os.remove(shard)
    script = f"""if True:
        import tensorflow as tf, readers
        from readers.tfdata.dataset import shard_records
        try:
            for _ in readers.make_dataset({copy!r}, batch_size=1, shuffle=False): pass
        except tf.errors.InvalidArgumentError as e: print("local:", e.message.splitlines()[0])
        try:
            for _ in shard_records(tf.constant({shard!r}), tf.constant(3, tf.int64),
                                   tf.constant("lost"), "", local=False): pass
        except tf.errors.NotFoundError as e: print("remote:", e.message.splitlines()[0])
        """
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                            timeout=120)
    run = read_dataset_json(copy)["run_id"]
    assert (f"{copy} was rewritten or deleted while this reader was open (it reads run {run}):"
            f" {shard} is gone; open it again") in result.stdout, result.stderr[-2000:]
    assert f"{shard}; No such file or directory" in result.stdout.split("remote:")[1]


@pytest.fixture(scope="module")
def rewritten(tmp_path_factory):
    """Readers of every kind opened on a dataset of four shards, one window read through
    each; then the job rerun into the directory with another seed. Yields what each had
    read, what the directory held before, and the two run ids."""
    root = tmp_path_factory.mktemp("rewrite")
    out = _build(root)
    before = read_examples(out)
    old_run = read_dataset_json(out)["run_id"]
    source = WindowSource(out)
    got = {"source": [source[0]]}
    batch_iter = batches(out, "train", batch_size=4, shuffle=False)
    got["batches"] = [next(batch_iter)]
    tf_iter = iter(readers.make_dataset(out, batch_size=1, shuffle=False))
    got["tf.data"] = [next(tf_iter)]
    old_spec = readers.load_spec(out)
    run_job(str(root / "in" / "*"), out, "--window", "4", "--stride", "2", "--num_shards", "4",
            "--seed", "3", "--overwrite")
    new_run = read_dataset_json(out)["run_id"]
    order = [(e["video_id"], e["start"]) for e in read_examples(out)]
    assert new_run != old_run and order != [(e["video_id"], e["start"]) for e in before]
    return dict(out=out, before=before, old=old_run, new=new_run, got=got, source=source,
                shard0=source.spec.splits["train"].shards[0].examples,
                batches=batch_iter, tf=tf_iter, spec=old_spec)


def _same(window, example) -> bool:
    return all(np.array_equal(np.asarray(window[k]).squeeze(), np.asarray(example[k]).squeeze())
               for k in ("window", "mask", "start"))


def test_window_source_reads_its_own_run_then_says_it_was_rewritten(rewritten):
    r = rewritten
    source, got = r["source"], r["got"]["source"]
    with pytest.raises(DatasetChanged, match=(
            rf"^{r['out']} was rewritten while this reader was open \(it reads run {r['old']}; "
            rf"dataset.json now names run {r['new']}\): train-00001-of-00004-{r['old']}"
            r"\.tfrecord\.index is gone; open it again$")):
        for i in range(1, len(source)):
            got.append(source[i])
    # shard 0, opened before the rewrite, read on whole
    assert len(got) == r["shard0"]
    assert all(_same(w, e) for w, e in zip(got, r["before"], strict=False))


def test_batches_read_their_own_run_then_say_it_was_rewritten(rewritten):
    r = rewritten
    got = r["got"]["batches"]
    with pytest.raises(DatasetChanged, match=f"was rewritten while this reader was open "
                                             f"\\(it reads run {r['old']};"):
        for batch in r["batches"]:
            got.append(batch)
    windows = [{k: v[row] for k, v in batch.items()} for batch in got for row in range(4)]
    assert windows and all(_same(w, e) for w, e in zip(windows, r["before"], strict=False))


def test_a_worker_process_says_the_dataset_was_rewritten(rewritten):
    """A DataLoader's or Grain's worker: the source pickled into another process, which
    opens the shards again."""
    r = rewritten
    spawn = multiprocessing.get_context("spawn")
    with concurrent.futures.ProcessPoolExecutor(1, mp_context=spawn) as pool:
        with pytest.raises(DatasetChanged, match=f"now names run {r['new']}\\): train-00000"):
            pool.submit(r["source"].__getitems__, [0, 1]).result()


def test_tf_data_reads_its_own_run_then_says_it_was_rewritten(rewritten):
    r = rewritten
    got = r["got"]["tf.data"]
    with pytest.raises(tf.errors.InvalidArgumentError, match=(
            rf"{r['out']} was rewritten or deleted while this reader was open \(it reads run "
            rf"{r['old']}\): {r['out']}/train-0000[1-3]-of-00004-{r['old']}\.tfrecord is gone; "
            "open it again")):
        for batch in r["tf"]:
            got.append(batch)
    assert 1 <= len(got) < len(r["before"])
    assert all(_same({k: v.numpy() for k, v in w.items()}, e)
               for w, e in zip(got, r["before"], strict=False))


def test_inspect_says_the_dataset_was_rewritten(rewritten):
    r = rewritten
    with pytest.raises(DatasetChanged, match=f"now names run {r['new']}"):
        verify(r["out"], r["spec"])
