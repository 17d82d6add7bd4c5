"""NVIDIA DALI reads our shards through our text index: the pipeline docs/readers.md shows
("NVIDIA DALI"), run as it is on the CPU, gives every window of latent, float16 and raw
kinds once, equal to readers.numpy's; png windows are refused, not read wrong. Runs
when `nvidia.dali` is installed (a 424 MB wheel, so not in CI), in a fresh interpreter:
DALI is not meant to share a process with TensorFlow."""
import importlib.util
import textwrap

import numpy as np
import pytest
from helpers import docs_code, read_dataset_json, run_apart

from readers.numpy import WindowSource

if importlib.util.find_spec("nvidia") is None or not importlib.util.find_spec("nvidia.dali"):
    pytest.skip("NVIDIA DALI is not installed (pip install nvidia-dali-cuda120)",
                allow_module_level=True)

# The pipeline of the docs, then every window of a split, one a batch, on the CPU.
_READ = docs_code("readers.md", "NVIDIA DALI") + textwrap.dedent('''
    import pickle, sys

    import numpy as np

    out, split = sys.argv[1], sys.argv[2]
    names = [f["name"] for f in json.load(open(os.path.join(out, "dataset.json")))["features"]]
    try:
        pipe = windows(out, split, batch_size=1, num_threads=1, device_id=None)
        pipe.build()
        read = []
        for _ in range(pipe.epoch_size("windows")):
            read.append({name: np.array(batch[0]) for name, batch in zip(names, pipe.run())})
    except ValueError as e:
        read = str(e)
    pickle.dump(read, open(os.environ["RESULT"], "wb"))
''')


def _key(window: dict) -> tuple[bytes, int]:
    """(video_id, start); video_id is bytes from readers.numpy, a uint8 tensor of its
    bytes from DALI."""
    video_id = np.asarray(window["video_id"])
    return (video_id.tobytes() if video_id.dtype == np.uint8 else bytes(video_id.item()),
            int(np.asarray(window["start"]).item()))


@pytest.mark.parametrize("name", ["latent", "float16", "raw"])
def test_the_docs_pipeline_reads_every_window_as_readers_numpy_does(kinds, tmp_path, name):
    path = kinds[name]
    read = run_apart(_READ, path, "train", tmp_path=tmp_path)
    ours = WindowSource(path, "train", keep_float16=True)
    expected = {_key(w): w for w in ours.__getitems__(range(len(ours)))}
    assert sorted(_key(w) for w in read) == sorted(expected)       # each exactly once
    for window in read:
        mine = expected[_key(window)]
        for feature in read_dataset_json(path)["features"]:
            if feature["encoding"] == "bytes":
                continue                                            # the key, compared above
            theirs = np.asarray(window[feature["name"]]).reshape(feature["shape"])
            np.testing.assert_array_equal(theirs, mine[feature["name"]],
                                          err_msg=f"{name} {feature['name']}")
            assert theirs.dtype == mine[feature["name"]].dtype


def test_png_windows_are_refused_not_read_as_their_first_frame(kinds, tmp_path):
    assert run_apart(_READ, kinds["png"], "train", tmp_path=tmp_path) == (
        "DALI cannot read png windows: a list of strings")


_EPOCHS = docs_code("readers.md", "NVIDIA DALI") + textwrap.dedent('''
    import pickle, sys

    import numpy as np

    out, split = sys.argv[1], sys.argv[2]
    epochs = []
    for shard in range(2):
        pipe = windows(out, split, batch_size=4, num_threads=1, device_id=None,
                       shard_id=shard, num_shards=2, shuffle=True)
        pipe.build()
        for epoch in range(2):
            keys = []
            for (window, mask, *rest), rows in one_epoch(pipe, 4):
                video_ids, starts = rest[-2], rest[-1]
                keys += [(np.array(video_ids[i]).tobytes(), int(np.array(starts[i]).item()))
                         for i in range(rows)]
            epochs.append((shard, epoch, keys))
    pickle.dump(epochs, open(os.environ["RESULT"], "wb"))
''')


def test_one_epoch_gives_every_window_once_across_pipelines_epoch_after_epoch(kinds, tmp_path):
    path = kinds["latent"]
    ours = WindowSource(path, "train")
    expected = sorted(_key(w) for w in ours.__getitems__(range(len(ours))))
    assert len(expected) % 4 and len(expected) // 2 % 4     # batches that do not fit
    epochs = run_apart(_EPOCHS, path, "train", tmp_path=tmp_path)
    for epoch in range(2):
        keys = [k for shard, e, part in epochs if e == epoch for k in part]
        assert sorted(keys) == expected, epoch
