"""The light install: `pip install video-window-shards` (no extra) is the numpy reader,
`readers.inspect --verify` and `--report`, without TensorFlow or Beam; what needs
TensorFlow says in one line how to add it; the job's sample is written without
TensorFlow too; and the reader-only tests run without Beam or TensorFlow."""
import os
import re
import subprocess
import sys

import numpy as np
import pytest
import tensorflow as tf
from helpers import run_jobs
from input_files import (
    random_videos,
    solid_frames,
    write_frame_folder,
    write_manifest,
    write_videos,
)

from beam_jobs import dependencies
from beam_jobs.sample import write_latent_sample

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
NO_TF = ("readers.make_dataset needs TensorFlow, which is not installed: "
         "pip install 'video-window-shards[tf]'")


def _name(requirement: str) -> str:
    """A requirement's distribution name, normalized: `apache-beam[gcp]==2` -> apache-beam."""
    return re.split(r"[\[=<>!~; ]", requirement, maxsplit=1)[0].lower().replace("_", "-")


def _requires(tmp_path) -> dict[str, set[str]]:
    """What setup.py declares, as setuptools writes it into the package's metadata:
    "" -> install_requires, extra -> its requirements (distribution names)."""
    subprocess.run([sys.executable, "setup.py", "-q", "egg_info", "--egg-base", str(tmp_path)],
                   cwd=ROOT, check=True, capture_output=True)
    (info,) = [d for d in os.listdir(tmp_path) if d.endswith(".egg-info")]
    sections, section = {"": set()}, ""
    for line in (tmp_path / info / "requires.txt").read_text().splitlines():
        if line.startswith("["):
            section = line.strip("[]")
            sections[section] = set()
        elif line.strip():
            sections[section].add(_name(line))
    return sections


def test_the_base_install_is_the_light_reader_and_each_extra_adds_its_part(tmp_path):
    requires = _requires(tmp_path)
    assert requires[""] == {"numpy", "google-crc32c", "pillow", "fsspec"}
    assert requires["tf"] == {"tensorflow-cpu"}
    # the job imports no TensorFlow: its install (and its sample) goes without it
    assert requires["beam"] == {"apache-beam", "av", "blake3", "gcsfs", "psutil"}
    # CI runs the Grain and PyTorch adapters' tests
    assert {"tensorflow-cpu", "apache-beam", "grain", "torch", "pytest"} <= requires["dev"]


@pytest.fixture(scope="module")
def datasets(tmp_path_factory):
    root = tmp_path_factory.mktemp("light")
    write_videos(str(root / "lat"), random_videos(np.random.default_rng(3), 6), files=2)
    write_frame_folder(root / "v", solid_frames(6))
    write_manifest(root / "m.jsonl", [{"video_id": "v", "frames": "v"}])
    return run_jobs(root, (("latent", "lat/*", []),
                           ("png", "m.jsonl", ["--frame_encoding", "png"]),
                           ("gzip", "lat/*", ["--compression", "gzip"])))


# A process that imports as the light install would: only the standard library, the
# project and the distributions of its install_requires (argv[2]); any other installed
# distribution's modules (TensorFlow, Beam, an optional library fsspec would try) are
# not found.
_LIGHT_INSTALL = """
import importlib.metadata, json, sys
paths, allowed = json.loads(sys.argv[1]), set(json.loads(sys.argv[2]))
owners = importlib.metadata.packages_distributions()

class LightInstall:
    def find_spec(self, name, path=None, target=None):
        top = name.split(".")[0]
        dists = {d.lower() for d in owners.get(top, ())}
        if top not in ("readers", "beam_jobs") and dists and not dists & allowed:
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)

sys.meta_path.insert(0, LightInstall())
try:
    import tensorflow
except ModuleNotFoundError:
    print("no tensorflow")
import readers
from readers.inspect import command as inspect
from readers.numpy import WindowSource, batches
for name in ("latent", "png"):
    batch = next(batches(paths[name], "train", 2))
    print(name, batch["window"].shape, WindowSource(paths[name])[0]["video_id"])
for path in paths.values():   # --report too: numpy, fsspec and Pillow, no TensorFlow
    inspect.main([path, "--verify", "--report", path + ".html"])
try:
    readers.make_dataset
except ImportError as e:
    print("make_dataset:", e)
inspect.main([paths["latent"], "--stats"])
"""


@pytest.mark.slow
def test_the_readers_and_verify_work_in_the_light_install(datasets, tmp_path):
    import json

    light = sorted(_requires(tmp_path)[""])
    result = subprocess.run([sys.executable, "-c", _LIGHT_INSTALL, json.dumps(datasets),
                             json.dumps(light)], capture_output=True, text=True, cwd=ROOT)
    out = result.stdout
    assert out.startswith("no tensorflow\n"), (out, result.stderr[-2000:])
    assert "latent (2, 4, 3) b'" in out and "png (2, 4, 24, 32, 3) b'v'" in out, \
        result.stderr[-2000:]
    assert out.count("verify: all") == 3, result.stderr[-2000:]
    for path in datasets.values():
        assert f"wrote {path}.html (" in out
        page = open(f"{path}.html", encoding="utf-8").read()
        assert "data-verify='sound'" in page and "id='unread'" not in page
    assert f"make_dataset: {NO_TF}" in out
    # --stats reads through tf.data: one line that says so, exit 2
    assert result.returncode == 2 and "Traceback" not in result.stderr, result.stderr[-2000:]
    assert result.stderr.strip().splitlines()[-1] == (
        "python -m readers.inspect: error: readers.inspect --stats needs TensorFlow, which "
        "is not installed: pip install 'video-window-shards[tf]'")


# pytest in a process where no distribution of the job's or the tf.data reader's extras
# (argv[1]: Beam, TensorFlow, PyAV, gcsfs ...) can be imported, with the rest of argv.
_WITHOUT_THE_JOB = """
import importlib.metadata, json, sys
blocked = set(json.loads(sys.argv[1]))
owners = importlib.metadata.packages_distributions()

class WithoutTheJob:
    def find_spec(self, name, path=None, target=None):
        dists = {d.lower().replace("_", "-") for d in owners.get(name.split(".")[0], ())}
        if dists & blocked:
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)

sys.meta_path.insert(0, WithoutTheJob())
import pytest
code = pytest.main(sys.argv[2:])
print("imported:", sorted({"apache_beam", "tensorflow"} & set(sys.modules)))
sys.exit(code)
"""


@pytest.mark.slow
def test_the_reader_only_tests_run_without_beam_or_tensorflow(tmp_path):
    """The inner loop of docs/contributing.md, tests/readers_only/ less its slow tests, in
    a process that cannot import Beam, TensorFlow or anything else only `[beam]` or
    `[tf]` installs: its datasets are written by readers/format alone. What needs
    TensorFlow (the tf.data side of the codec tests) skips, saying what it needs."""
    import json

    requires = _requires(tmp_path)
    blocked = sorted(requires["beam"] | requires["tf"])
    assert {"apache-beam", "tensorflow-cpu"} <= set(blocked)
    result = subprocess.run(
        [sys.executable, "-c", _WITHOUT_THE_JOB, json.dumps(blocked), "-q", "-p", "no:xdist",
         "-p", "no:cacheprovider", "--basetemp", str(tmp_path / "light"), "-m", "not slow",
         "-rs", "tests/readers_only"], capture_output=True, text=True, cwd=ROOT, timeout=900)
    out = result.stdout
    assert result.returncode == 0, out[-3000:] + result.stderr[-2000:]
    assert "imported: []" in out, out[-3000:]
    passed = int(re.search(r"(\d+) passed", out).group(1))
    assert passed >= 100, out[-3000:]
    skips = re.findall(r"^SKIPPED \[\d+\] .*$", out, re.M)
    assert any("needs TensorFlow" in line for line in skips), skips
    assert all(" needs " in line for line in skips), skips


def test_the_job_stages_what_a_worker_needs_beyond_the_light_install():
    assert dependencies.worker_requirements() == ["av==18.1.0", "blake3==1.0.11",
                                                  "gcsfs==2026.10.1"]
    assert "tensorflow-cpu==2.21.0" in dependencies.worker_requirements("tf")


def test_the_sample_is_what_tensorflow_writes(tmp_path):
    """beam_jobs.sample writes its records by hand: the bytes of tf.io.serialize_tensor
    and of a deterministic tf.train.Example."""
    (path,) = write_latent_sample(str(tmp_path), videos=3, files=1, dim=5, frames=(3, 7))
    records = [r.numpy() for r in tf.data.TFRecordDataset(path)]
    assert len(records) == 3
    for record in records:
        example = tf.train.Example.FromString(record)
        assert example.SerializeToString(deterministic=True) == record
        (frames,) = example.features.feature["frames"].bytes_list.value
        array = tf.io.parse_tensor(frames, tf.float32)
        assert array.shape[1] == 5 and 3 <= array.shape[0] < 7
        assert tf.io.serialize_tensor(array).numpy() == frames
        assert len(example.features.feature["recipe"].float_list.value) == 4


def test_a_record_that_claims_more_than_its_file_is_lost_not_allocated(tmp_path):
    """`--verify` (and the job) read frames with read_frame: a length header whose CRC
    holds but that claims 2**50 bytes is a lost record, not a MemoryError."""
    import struct

    from readers.format import tfrecord

    head = struct.pack("<Q", 1 << 50)
    path = tmp_path / "claims.tfrecord"
    path.write_bytes(head + struct.pack("<I", tfrecord.masked_crc(head)) + b"x" * 100)
    with open(path, "rb") as f:
        lost = tfrecord.read_frame(f)
    assert isinstance(lost, tfrecord.Lost) and lost.framing and "100 of" in lost.reason
