"""The `tfrecord` package (PyPI, PyTorch's usual TFRecord reader) reads our shards through
our text index: two readers splitting each shard with its `shard=(i, n)` get every window
once, with the values readers.numpy gives. It runs in a subprocess: its generated protos
clash with TensorFlow's in one process (`duplicate symbol 'tensorflow.BytesList'`)."""
import importlib.util
import os
import textwrap

import numpy as np
import pytest
from helpers import docs_code, read_dataset_json, run_apart

from readers.numpy import WindowSource

if importlib.util.find_spec("tfrecord") is None:   # found, not imported: it clashes here
    pytest.skip("the tfrecord package (a dev dependency) is not installed",
                allow_module_level=True)

# The code docs/readers.md shows, run as it is, then: for each (dataset, split) given,
# our index against what the package's tfrecord2idx writes, and the windows each of
# `workers` readers gets. One process for every case: the package's import is its cost.
_READ = docs_code("readers.md", "The `tfrecord` package") + textwrap.dedent('''
    import pickle, sys
    from tfrecord.tools.tfrecord2idx import create_index

    workers, results = int(sys.argv[1]), {}
    for out, split in zip(sys.argv[2::2], sys.argv[3::2]):
        meta = json.load(open(os.path.join(out, "dataset.json")))
        theirs = {}
        for shard in meta["splits"][split]["shards"]:
            create_index(os.path.join(out, shard["file"]), os.environ["RESULT"] + ".idx")
            theirs[shard["index"]] = open(os.environ["RESULT"] + ".idx", "rb").read()
        read = [list(windows(out, split, w, workers)) for w in range(workers)]
        writable = all(v.flags.writeable for part in read for window in part
                       for v in window.values() if isinstance(v, np.ndarray))
        results[out, split] = {"workers": read, "tfrecord2idx": theirs, "writable": writable}
    pickle.dump(results, open(os.environ["RESULT"], "wb"))
''')
CASES = [("latent", "train"), ("latent", "test"), ("float16", "train"), ("raw", "train"),
         ("png", "train")]


@pytest.fixture(scope="module")
def read(kinds, tmp_path_factory) -> dict:
    """What two readers of the package read of each case, in one other process."""
    args = [a for name, split in CASES for a in (kinds[name], split)]
    return run_apart(_READ, "2", *args, tmp_path=tmp_path_factory.mktemp("tfrecord_package"))


def _key(window: dict) -> tuple[bytes, int]:
    return bytes(np.asarray(window["video_id"]).item()), int(np.asarray(window["start"]).item())


@pytest.mark.parametrize("name, split", CASES)
def test_two_readers_split_each_shard_through_our_index(kinds, read, name, split):
    path = kinds[name]
    read = read[path, split]
    meta = read_dataset_json(path)
    shards = meta["splits"][split]["shards"]
    assert all(s["examples"] >= 2 for s in shards)     # each reader gets part of each
    for shard in shards:    # our index is the one tfrecord2idx writes, byte for byte
        with open(os.path.join(path, shard["index"]), "rb") as f:
            assert read["tfrecord2idx"][shard["index"]] == f.read()
    ours = WindowSource(path, split, keep_float16=True)
    expected = {_key(w): w for w in ours.__getitems__(range(len(ours)))}
    seen = [_key(w) for worker in read["workers"] for w in worker]
    assert all(read["workers"]) and sorted(seen) == sorted(expected)   # each exactly once
    assert read["writable"]   # what a DataLoader's collate takes without a warning
    for worker in read["workers"]:
        for window in worker:
            mine = expected[_key(window)]
            for feature in meta["features"]:
                theirs = window[feature["name"]]
                if feature["encoding"] == "bytes":
                    assert bytes(theirs) == bytes(mine[feature["name"]])
                else:
                    np.testing.assert_array_equal(theirs, mine[feature["name"]],
                                                  err_msg=f"{name} {feature['name']}")
                    assert theirs.dtype == mine[feature["name"]].dtype


_ONE_RECORD = textwrap.dedent('''
    import json, os, pickle, sys
    from tfrecord.reader import tfrecord_loader

    out = sys.argv[1]
    shard = min((s for s in json.load(open(os.path.join(out, "dataset.json")))["splits"]
                 ["train"]["shards"]), key=lambda s: s["examples"])
    path = os.path.join(out, shard["file"])
    try:
        list(tfrecord_loader(path, os.path.join(out, shard["index"]), None))
        indexed = "read"
    except IndexError as e:
        indexed = f"IndexError: {e}"
    whole = len(list(tfrecord_loader(path, None, None)))
    pickle.dump({"examples": shard["examples"], "indexed": indexed, "whole": whole},
                open(os.environ["RESULT"], "wb"))
''')


def test_a_one_record_shard_is_warned_of_and_read_as_the_docs_say(tmp_path, rng, caplog):
    """5 windows in 3 shards: one shard holds one, which the package cannot read through
    its index; the job says so, and index_path=None reads it (docs/readers.md)."""
    from helpers import run_job
    from input_files import random_videos, write_videos

    write_videos(str(tmp_path / "in"), random_videos(rng, 5, lengths=(4, 5)), files=1)
    run_job(str(tmp_path / "in" / "*"), tmp_path / "out", "--window", "4", "--num_shards", "3")
    assert "1 shard(s) hold a single window" in caplog.text and "index_path=None" in caplog.text
    found = run_apart(_ONE_RECORD, str(tmp_path / "out"), tmp_path=tmp_path)
    assert found["examples"] == 1 and found["indexed"].startswith("IndexError")
    assert found["whole"] == 1
