"""Split assignment and shuffle keys."""
import collections
import itertools
import json

import pytest
from helpers import assert_verified, read_dataset_json, read_examples, sidecar
from input_files import solid_frames, write_frame_folder, write_manifest

from beam_jobs import make_shards
from readers.format.keys import assign_split, parse_splits, window_key


def test_parse_splits_reads_name_fraction_pairs():
    assert parse_splits("train=0.9,validation=0.1") == {"train": 0.9, "validation": 0.1}
    assert parse_splits("train=1.0") == {"train": 1.0}


@pytest.mark.parametrize("text", ["train", "train=0.5", "train=0.9,train=0.1", "a b=1",
                                  "train=x", "train=1.5,val=-0.5", "train=0.7,val=0.2"])
def test_malformed_splits_are_refused(text):
    with pytest.raises(ValueError):
        parse_splits(text)


def test_split_assignment_is_stable_and_follows_the_fractions():
    splits = {"train": 0.8, "validation": 0.1, "test": 0.1}
    ids = [f"video-{i}" for i in range(5000)]
    first = [assign_split(0, v, splits) for v in ids]
    assert first == [assign_split(0, v, splits) for v in ids]
    counts = collections.Counter(first)
    assert abs(counts["train"] / 5000 - 0.8) < 0.03
    assert abs(counts["test"] / 5000 - 0.1) < 0.02
    other_seed = [assign_split(1, v, splits) for v in ids]
    assert other_seed != first


def test_window_keys_differ_per_window_and_seed():
    keys = {window_key(0, f"v{i}", s) for i in range(100) for s in range(0, 500, 50)}
    assert len(keys) == 1000
    assert window_key(0, "v", 0) != window_key(1, "v", 0)
    assert all(0 <= k < 2 ** 64 for k in keys)


@pytest.mark.slow
@pytest.mark.parametrize("shuffle", ["spill", "group"])
def test_keys_of_2_63_and_above_pass_through_every_transform_that_carries_them(tmp_path,
                                                                              shuffle):
    """A window key is unsigned 64-bit: half of them are past the signed range of Beam's
    VarIntCoder, which Beam 2.78 gave the `int` of an annotation, and a run with an id
    given twice failed in FindDuplicates/KeysOfCopies. Here every key is 2**63 or more,
    and keys take every way they travel: the examples through the shuffle, each video's
    first key to the split statistics, and the keys of an id's copies, of an alias and
    of a video that failed half-way to the shard writer, which leaves those out."""
    starts = (0, 2, 4)   # of 6 frames, --window 2 --stride 2
    high = (f"v{i}" for i in itertools.count()
            if all(window_key(0, f"v{i}", start) >= 2**63 for start in starts))
    kept, alias, twice, half, *others = sorted(itertools.islice(high, 6))
    write_frame_folder(tmp_path / "v", solid_frames(6))
    write_manifest(tmp_path / "m.jsonl", [
        {"video_id": kept, "frames": "v", "labels": list(range(6))},
        {"video_id": alias, "frames": "v", "labels": list(range(6))},   # kept's content
        {"video_id": twice, "frames": "v", "labels": list(range(1, 7))},
        {"video_id": twice, "frames": "v", "labels": list(range(2, 8))},
        {"video_id": half, "frames": "v", "labels": list(range(8))},  # fails after 3 windows
        *({"video_id": v, "frames": "v", "labels": list(range(i, i + 6))}
          for i, v in enumerate(others, start=3))])
    out = tmp_path / "out"
    make_shards.run(["--input", str(tmp_path / "m.jsonl"), "--output_dir", str(out),
                     "--window", "2", "--stride", "2", "--shuffle", shuffle,
                     "--max_failure_fraction", "0.9"])
    assert_verified(out)
    stored = [(e["video_id"], int(e["start"])) for e in read_examples(out)]
    assert sorted(stored) == [(v, s) for v in sorted([kept, *others]) for s in starts]
    with open(sidecar(out, "failures")) as f:
        assert sorted(json.loads(line)["video_id"] for line in f) == sorted(
            [twice, twice, half])
    meta = read_dataset_json(out)
    assert meta["generations"][0]["skipped_existing"] == 1   # the alias
    assert meta["splits"]["train"]["frames"] == meta["stats"]["train"]["window"][
        "frames"] == 18
