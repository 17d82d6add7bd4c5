"""The `tfrecord` package (PyPI, PyTorch's usual TFRecord reader) reads our shards through
our text index: two readers splitting each shard with its `shard=(i, n)` get every window
once, with the values readers.numpy gives. It runs in a subprocess: its generated protos
clash with TensorFlow's in one process (`duplicate symbol 'tensorflow.BytesList'`)."""
import importlib.util
import os
import textwrap

import numpy as np
import pytest

from helpers import (docs_code, random_videos, read_dataset_json, run_apart, run_jobs,
                     write_frame_folder, write_manifest, write_videos)
from readers.numpy import WindowSource

if importlib.util.find_spec("tfrecord") is None:   # found, not imported: it clashes here
    pytest.skip("the tfrecord package (a dev dependency) is not installed",
                allow_module_level=True)

# The code docs/readers.md shows, run as it is, then: our index against what the package's
# tfrecord2idx writes, and the windows each of `workers` readers gets.
_READ = docs_code("readers.md", "The `tfrecord` package") + textwrap.dedent('''
    import pickle, sys
    from tfrecord.tools.tfrecord2idx import create_index

    out, split, workers = sys.argv[1], sys.argv[2], int(sys.argv[3])
    meta = json.load(open(os.path.join(out, "dataset.json")))
    theirs = {}
    for shard in meta["splits"][split]["shards"]:
        create_index(os.path.join(out, shard["file"]), os.environ["RESULT"] + ".idx")
        theirs[shard["index"]] = open(os.environ["RESULT"] + ".idx", "rb").read()
    read = [list(windows(out, split, w, workers)) for w in range(workers)]
    pickle.dump({"workers": read, "tfrecord2idx": theirs}, open(os.environ["RESULT"], "wb"))
''')


@pytest.fixture(scope="module")
def datasets(tmp_path_factory):
    root = tmp_path_factory.mktemp("tfrecord_package")
    rng = np.random.default_rng(24)
    write_videos(str(root / "lat"), random_videos(rng, 10, lengths=(20, 40)), files=2)
    half = [(f.astype(np.float16), r) for f, r in random_videos(rng, 3, lengths=(12, 20))]
    write_videos(str(root / "half"), half, files=1)
    for v in range(2):
        write_frame_folder(root / f"v{v}", [np.asarray(f) for f in rng.integers(
            0, 255, (9 + v, 24, 32, 3), np.uint8)])
    write_manifest(root / "m.jsonl", [{"video_id": f"v{v}", "frames": f"v{v}"}
                                      for v in range(2)])
    return run_jobs(root, (
        ("latent", "lat/*", ["--splits", "train=0.7,test=0.3", "--num_shards", "3"]),
        ("float16", "half/*", ["--num_shards", "2"]),
        ("raw", "m.jsonl", ["--frame_encoding", "raw", "--num_shards", "2"]),
        ("png", "m.jsonl", ["--frame_encoding", "png", "--num_shards", "2"])))


def _key(window: dict) -> tuple[bytes, int]:
    return bytes(np.asarray(window["video_id"]).item()), int(np.asarray(window["start"]).item())


@pytest.mark.parametrize("name, split", [("latent", "train"), ("latent", "test"),
                                         ("float16", "train"), ("raw", "train"),
                                         ("png", "train")])
def test_two_readers_split_each_shard_through_our_index(datasets, tmp_path, name, split):
    path = datasets[name]
    read = run_apart(_READ, path, split, "2", tmp_path=tmp_path)
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
