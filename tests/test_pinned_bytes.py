"""The bytes of the shards, indexes and window tables are pinned: a refactor must not
change one of them.

Inputs are made from integer arithmetic (no random generator, no libm), so that the
same pinned versions give the same bytes on any machine of this kind. dataset.json is
not pinned (it holds the run id); its splits are, through the shard names.
"""
import hashlib
import os

import numpy as np
import pytest
from helpers import plain_name, run_job
from input_files import write_frame_folder, write_manifest, write_videos

pytestmark = pytest.mark.slow   # six builds


PINNED = {
    "latents_two_splits": {
        "train-00000-of-00002.tfrecord":
            "97c60c2f745fab410d5c70d213cce8ea5f1960abc16c513e72ddfd37287b74b1",
        "train-00000-of-00002.tfrecord.index":
            "a566ab84a5d5ec315fca40f4d860e254e2cb11b2f8d7b6c897660f2782b2075d",
        "train-00001-of-00002.tfrecord":
            "7aec3f0f966d8047bcdab5d3c801daed688f8e2bf47bdb3894f405ccf00e3d1f",
        "train-00001-of-00002.tfrecord.index":
            "330c1581c2e75168473006a1a4b1abbee96c5998d57b67a6a59ebe7b298af491",
        "val-00000-of-00002.tfrecord":
            "ecf25797ab30092e3fed907dfae3db833c90bb899a3b1bc4cc922a40f4972c7f",
        "val-00000-of-00002.tfrecord.index":
            "68b381d2a866bd7b0beeb3785b72dac10b838187d3c7ea590ba14bc9db071b96",
        "val-00001-of-00002.tfrecord":
            "12b55bcad127f464a2160d9c713a3f76baabd24503a07887f5924bdb6631351a",
        "val-00001-of-00002.tfrecord.index":
            "68b381d2a866bd7b0beeb3785b72dac10b838187d3c7ea590ba14bc9db071b96",
        "train-00000-of-00002.tfrecord.table":
            "528b95684c53138c288c7b6907d31c0ba9f51d0b75399f006b5759cc70eba23c",
        "train-00001-of-00002.tfrecord.table":
            "7acb7420bce77eb0b165341abcc369487d0404724f3843103ff10b6c651fea98",
        "val-00000-of-00002.tfrecord.table":
            "117452fbe556a585a1b6175b074dbc8a8d3c4290b2435e4e88c1c13a6bb3c4a4",
        "val-00001-of-00002.tfrecord.table":
            "b8da81b0ffbc06aa335b22351292062f2e004cdd0bc3d3abf7156a0d929cf94d",
    },
    "float16_pad": {
        "train-00000-of-00001.tfrecord":
            "f3f2ea8c920ce2e0514fc3b080cf16495b933b7a20b6900ba4e72cc39ac62aae",
        "train-00000-of-00001.tfrecord.index":
            "eaa63873cd711c9e8005a1e17ba9c2b92153032ca265ed9397426d602c2a3d28",
        "train-00000-of-00001.tfrecord.table":
            "7cc285ed0e62041acad4f91ce5b6507c831892dcd4c8be9ba31ac67aa680a23f",
    },
    "jpeg": {
        "train-00000-of-00001.tfrecord":
            "52b240ee7d25945c11856425eae8650b46aee759c39218e7d7689b9d7d4b8630",
        "train-00000-of-00001.tfrecord.index":
            "d34251caf4b2ee536fcb1646b5732b1bd6fe766717adaec82dd486753a7729a3",
        "train-00000-of-00001.tfrecord.table":
            "08e876c12b8507102a3c473a16ce2a2cb849d67cbf834a877b7d7974bc61f719",
    },
    "png_resized": {
        "train-00000-of-00001.tfrecord":
            "81a0a8bae97082a51947ea994e62f84a0675344edcbd450894ada76424f7329d",
        "train-00000-of-00001.tfrecord.index":
            "2c44d817f0331d601c6071dcf13a5b0d93f174d4c9a392c09be78dbd26288946",
        "train-00000-of-00001.tfrecord.table":
            "19882f7b7c5805fcb5ce523e5a4ac4f545c100afe921f7ebb75489b7d0dbb481",
    },
    "raw_grayscale": {
        "train-00000-of-00001.tfrecord":
            "cc85b57e38b555f1f1f78f2142811275b2506245cb09b73228c70fedbb9edbd9",
        "train-00000-of-00001.tfrecord.index":
            "4f853bcc14dd4daad261efe31ec451ba4de3175f0f7ff2c136677d568e2b9e28",
        "train-00000-of-00001.tfrecord.table":
            "7114e5bf694fc7482f62ca80d88b438482e0180bdb144edb3a0b504b1d4c627d",
    },
}


def _latents(count: int, dim: int, dtype) -> list[tuple[np.ndarray, np.ndarray]]:
    videos = []
    for v in range(count):
        frames = 12 + (v * 5) % 11
        grid = np.arange(frames * dim, dtype=np.int64).reshape(frames, dim)
        values = ((grid * 7919 + v * 104729) % 2001 - 1000) / 1000.0
        recipe = (np.arange(4, dtype=np.int64) + v) / 8.0
        videos.append((values.astype(dtype), recipe.astype(np.float32)))
    return videos


def _frames(count: int, seed: int, size=(24, 32)) -> list[np.ndarray]:
    y, x = np.mgrid[:size[0], :size[1]]
    return [((x * 5 + y * 3 + i * 17 + seed * 29 + (x * y) % 7) % 256).astype(np.uint8)[
        ..., None].repeat(3, -1) + np.array([0, 40, 80], np.uint8) for i in range(count)]


@pytest.fixture(scope="module")
def built(tmp_path_factory) -> dict[str, str]:
    root = tmp_path_factory.mktemp("pinned")
    write_videos(str(root / "lat"), _latents(12, 6, np.float32), files=2)
    write_videos(str(root / "half"), _latents(5, 4, np.float16), files=1)
    rows = []
    for v in range(3):
        write_frame_folder(root / f"v{v}", _frames(7 + 2 * v, v))
        rows.append({"video_id": f"clip{v}", "frames": f"v{v}"})
    write_manifest(root / "m.jsonl", rows)
    jobs = {
        "latents_two_splits": ("lat/*", ["--window", "5", "--stride", "3", "--splits",
                                         "train=0.7,val=0.3", "--num_shards", "2"]),
        "float16_pad": ("half/*", ["--window", "5", "--stride", "4", "--tail", "pad"]),
        "jpeg": ("m.jsonl", ["--window", "4", "--stride", "2", "--frame_encoding", "jpeg"]),
        # --resize exact: the bytes of a job before the flag (fast is checked against
        # exact in test_resize.py); inputs not resized are the same bytes either way
        "png_resized": ("m.jsonl", ["--window", "4", "--stride", "3", "--frame_encoding",
                                    "png", "--frame_size", "12x20", "--resize", "exact"]),
        "raw_grayscale": ("m.jsonl", ["--window", "3", "--stride", "2", "--frame_encoding",
                                      "raw", "--channels", "1"]),
    }
    for name, (inp, flags) in jobs.items():
        run_job(str(root / inp), root / name, *flags)
    return {name: str(root / name) for name in jobs}


def _digests(path: str) -> dict[str, str]:
    """sha256 by shard name without its run id (plain_name): the bytes are pinned."""
    return {plain_name(name): hashlib.sha256(open(os.path.join(path, name), "rb").read()
                                             ).hexdigest()
            for name in sorted(os.listdir(path)) if ".tfrecord" in name}


@pytest.mark.parametrize("name", sorted(PINNED))
def test_shard_and_index_bytes_are_pinned(built, name):
    assert _digests(built[name]) == PINNED[name]
