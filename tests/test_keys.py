"""Split assignment and shuffle keys."""
import collections

import pytest

from beam_jobs.cut.keys import assign_split, parse_splits, window_key


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
