"""End-to-end runs of the job on the DirectRunner (FnApiRunner) over latent TFRecords."""
import collections
import os

import numpy as np
import pytest
from helpers import plain_name, plain_names, read_dataset_json, read_examples, run_job
from input_files import latent_example, random_videos, write_records, write_videos

from readers.format.windows import window_starts

pytestmark = pytest.mark.slow   # every test runs the job


def _videos_by_id(paths, videos):
    """id -> (frames, recipe), for videos written round-robin by write_videos."""
    files = len(paths)
    return {f"{os.path.basename(paths[i % files])}:{i // files}": v for i, v in enumerate(videos)}


@pytest.mark.parametrize("tail", ["align_end", "drop", "pad"])
def test_every_window_is_its_source_slice_with_its_metadata(tmp_path, rng, tail):
    videos = random_videos(rng, 14, lengths=(5, 60))
    paths = write_videos(str(tmp_path / "in"), videos, files=3)
    out = tmp_path / "out"
    run_job(str(tmp_path / "in" / "*.tfrecord"), out, "--window", "10", "--stride", "4",
            "--tail", tail, "--splits", "train=0.6,validation=0.4", "--num_shards", "3",
            "--shuffle_bucket_mb", "0.01", "--spill_buffer_mb", "0.01")
    by_id = _videos_by_id(paths, videos)
    meta = read_dataset_json(out)
    seen = collections.defaultdict(list)
    split_of = {}
    for split in ("train", "validation"):
        examples = read_examples(out, split)
        assert len(examples) == meta["splits"][split]["windows"]
        for ex in examples:
            frames, recipe = by_id[ex["video_id"]]
            start, t = int(ex["start"]), len(frames)
            real = min(10, t - start)
            np.testing.assert_array_equal(ex["window"][:real], frames[start:start + real])
            assert not ex["window"][real:].any()
            assert ex["mask"].tolist() == [1.0] * real + [0.0] * (10 - real)
            np.testing.assert_array_equal(ex["metadata"], recipe)
            assert split_of.setdefault(ex["video_id"], split) == split  # no leak across splits
            seen[ex["video_id"]].append(start)
    for video_id, (frames, _) in by_id.items():
        assert sorted(seen.get(video_id, [])) == window_starts(len(frames), 10, 4, tail)
    short = sum(1 for f, _ in videos if len(f) < 10)
    skipped = sum(s["skipped_short"] for s in meta["splits"].values())
    assert skipped == (0 if tail == "pad" else short)
    assert sum(s["videos"] for s in meta["splits"].values()) == len(videos) - skipped
    assert meta["window"] == {"length": 10, "stride": 4, "tail": tail}
    assert meta["failures"] == 0 and meta["compression"] == "none"
    assert [f["name"] for f in meta["features"]] == ["window", "mask", "metadata", "video_id",
                                                     "start"]
    assert meta["flags"]["window"] == 10


def test_832x200_latents_and_a_recipe_give_16_windows_each_of_their_frames(tmp_path, rng):
    """832 x 200 float32 latents with a 4-float recipe, windows of 100 every 50."""
    videos = [(rng.standard_normal((832, 200)).astype(np.float32),
               rng.random(4).astype(np.float32)) for _ in range(3)]
    paths = write_videos(str(tmp_path / "in"), videos, files=1)
    run_job(paths[0], tmp_path / "out", "--window", "100", "--stride", "50")
    examples = read_examples(tmp_path / "out")
    assert len(examples) == 3 * 16
    by_id = _videos_by_id(paths, videos)
    for ex in examples:
        frames, recipe = by_id[ex["video_id"]]
        np.testing.assert_array_equal(ex["window"], frames[ex["start"]:ex["start"] + 100])
        np.testing.assert_array_equal(ex["metadata"], recipe)
    assert sorted({int(e["start"]) for e in examples})[-1] == 732


def test_float_list_sequences_ids_float16_and_gzip(tmp_path, rng):
    frames = [rng.standard_normal((n, 2, 3)).astype(np.float32) for n in (12, 30)]
    write_records(str(tmp_path / "fl" / "a.tfrecord"),
                  [latent_example(f, [1, 2], video_id=f"clip{i}", float_list=True)
                   for i, f in enumerate(frames)])
    run_job(str(tmp_path / "fl" / "*"), tmp_path / "out", "--window", "8",
            "--sequence_shape", "2,3", "--id_feature", "vid", "--compression", "gzip")
    meta = read_dataset_json(tmp_path / "out")
    assert all(s["file"].endswith(".tfrecord.gz") for s in meta["splits"]["train"]["shards"])
    examples = read_examples(tmp_path / "out")
    assert {e["video_id"] for e in examples} == {"clip0", "clip1"}
    for e in examples:
        f = frames[int(e["video_id"][-1])]
        np.testing.assert_array_equal(e["window"], f[e["start"]:e["start"] + 8])

    half = [rng.standard_normal((25, 4)).astype(np.float16) for _ in range(3)]
    write_records(str(tmp_path / "f16" / "a.tfrecord.gz"),
                  [latent_example(f) for f in half], compression="GZIP")
    run_job(str(tmp_path / "f16" / "*"), tmp_path / "out16", "--window", "10", "--stride", "5")
    window = next(f for f in read_dataset_json(tmp_path / "out16")["features"]
                  if f["name"] == "window")
    assert window == {"name": "window", "shape": [10, 4], "dtype": "float16", "encoding": "raw",
                      "stored_as": {"list": "bytes_list", "values": 1, "value_dtype": "float16",
                                    "byte_order": "little", "content": "the array's bytes",
                                    "order": "row-major (C) flattening of shape"}}
    for e in read_examples(tmp_path / "out16"):
        assert e["window"].dtype == np.float16 and "metadata" not in e
        index = int(e["video_id"].split(":")[1])
        np.testing.assert_array_equal(e["window"], half[index][e["start"]:e["start"] + 10])


def test_shards_are_balanced_named_and_clamped(tmp_path, rng):
    videos = random_videos(rng, 9, lengths=(20, 40))
    write_videos(str(tmp_path / "in"), videos)
    run_job(str(tmp_path / "in" / "*"), tmp_path / "out", "--window", "5", "--stride", "5",
            "--num_shards", "7", "--shuffle_bucket_mb", "0.005",
            "--spill_buffer_mb", "0.005")
    meta = read_dataset_json(tmp_path / "out")
    shards = meta["splits"]["train"]["shards"]
    assert [plain_name(s["file"]) for s in shards] == [
        f"train-{i:05d}-of-00007.tfrecord" for i in range(7)]
    counts = [s["examples"] for s in shards]
    assert max(counts) - min(counts) <= 1
    assert sum(counts) == meta["splits"]["train"]["windows"]
    assert [len(read_examples_of(tmp_path / "out", s["file"])) for s in shards] == counts

    write_videos(str(tmp_path / "few"), videos[:1], files=1)
    run_job(str(tmp_path / "few" / "*"), tmp_path / "clamped", "--window", "10",
            "--num_shards", "1000")
    clamped = read_dataset_json(tmp_path / "clamped")["splits"]["train"]
    assert len(clamped["shards"]) == clamped["windows"] == len(videos[0][0]) // 10 + (
        len(videos[0][0]) % 10 > 0)
    assert all(s["examples"] == 1 for s in clamped["shards"])
    assert plain_names(os.listdir(tmp_path / "clamped")) == plain_names(
        ["dataset.json", "dataset_info.json", "failures.jsonl", "videos.jsonl"]
        + [name for s in clamped["shards"] for name in (s["file"], s["index"], s["table"])])


def read_examples_of(out, file):
    import tensorflow as tf
    return list(tf.data.TFRecordDataset(os.path.join(out, file)))


def test_windows_are_shuffled_across_videos_and_shards(tmp_path, rng):
    videos = random_videos(rng, 30, lengths=(60, 61))
    write_videos(str(tmp_path / "in"), videos, files=3)
    run_job(str(tmp_path / "in" / "*"), tmp_path / "out", "--window", "10", "--stride", "5",
            "--num_shards", "4")
    examples = read_examples(tmp_path / "out")
    ids = [e["video_id"] for e in examples]
    same_neighbour = np.mean([a == b for a, b in zip(ids, ids[1:], strict=False)])
    assert same_neighbour < 3 / 30  # 1/30 expected; sorted by video it would be ~0.9
    first_shard = ids[:len(ids) // 4]
    assert len(set(first_shard)) > 20  # every shard draws from (nearly) all videos
