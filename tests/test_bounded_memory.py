"""A shuffle task's memory is bounded whatever the bucket estimate says: inputs whose
size the job misjudges 30-100x, in both shuffle modes, against runs sized right."""
import os

import numpy as np
import pytest
from apache_beam.metrics.metric import MetricsFilter
from helpers import assert_verified, plain_name
from input_files import (
    latent_example,
    solid_frames,
    write_frame_folder,
    write_manifest,
    write_records,
)

from beam_jobs import make_shards
from beam_jobs.shuffle.sorted_files import sort_bounded

BUDGET_MB = 0.1
BUDGET = int(BUDGET_MB * 2**20)


def test_sort_bounded_sorts_any_size_in_its_budget(rng):
    records = [(int(rng.integers(0, 50)), rng.bytes(int(rng.integers(1, 300))),
                int(rng.integers(0, 2**64, dtype=np.uint64)), int(rng.integers(0, 17)))
               for _ in range(3000)]   # keys tie often: the examples' bytes order them
    sorts = []
    assert list(sort_bounded(iter(records), 20_000, sorts.append)) == sorted(records)
    assert len(sorts) > 10 and max(sorts) < 20_000 + 300
    small = []
    assert list(sort_bounded(records[:10], 20_000, small.append)) == sorted(records[:10])
    assert small == [sum(len(record[1]) for record in records[:10])]


def _run(input_glob, out, mode, bucket_mb, *flags):
    """Run the job; (the largest in-memory sort a shuffle task did, all sorted bytes,
    bucket files written)."""
    result = make_shards.run(["--input", input_glob, "--output_dir", str(out),
                              "--shuffle", mode, "--shuffle_bucket_mb", str(bucket_mb),
                              "--spill_buffer_mb", str(BUDGET_MB), "--num_shards", "3",
                              *flags])
    assert_verified(out)
    query = result.metrics().query(MetricsFilter().with_name("sort_bytes"))
    (sorts,) = [d.committed for d in query["distributions"]]
    files = result.metrics().query(MetricsFilter().with_name("temp_files_written"))
    return sorts.max, sorts.sum, sum(c.committed for c in files["counters"])


def _same_shards(a, b):
    """The same shards, byte for byte, under the same names but for the run id."""
    shards = [{plain_name(n): os.path.join(d, n) for n in os.listdir(d)
               if n.endswith(".tfrecord")} for d in (a, b)]
    assert len(shards[0]) == 3 and sorted(shards[0]) == sorted(shards[1])
    for name, path in shards[0].items():
        with open(path, "rb") as x, open(shards[1][name], "rb") as y:
            assert x.read() == y.read(), name


def _check(wrong, right, mode, held, total, files):
    assert total > 20 * BUDGET                     # the data: 20x the budget or more
    if mode == "group":
        assert files <= 2                          # ... which the estimate put in 1-2 buckets
    assert held <= BUDGET + 4096                   # yet no task sorted much over its budget
    _same_shards(wrong, right)


@pytest.mark.slow
@pytest.mark.parametrize("mode", ["group", "spill"])
def test_gzip_latents_compressed_far_past_the_estimate(tmp_path, mode):
    """Zero-heavy latents gzip about 100x, not the 4x the estimate assumes."""
    records = []
    for i in range(16):
        frames = np.zeros((400, 64), np.float32)
        frames[:, 0] = i
        records.append(latent_example(frames, [1.0, 2.0, 3.0, 4.0], video_id=f"v{i}"))
    write_records(str(tmp_path / "gz" / "lat.tfrecord.gz"), records, "GZIP")
    write_records(str(tmp_path / "raw" / "lat.tfrecord"), records)
    flags = ("--window", "10", "--stride", "5", "--id_feature", "vid")
    held, total, files = _run(str(tmp_path / "gz" / "*"), tmp_path / "wrong", mode,
                              BUDGET_MB, *flags)
    _run(str(tmp_path / "raw" / "*"), tmp_path / "right", mode, BUDGET_MB, *flags)
    _check(tmp_path / "wrong", tmp_path / "right", mode, held, total, files)


@pytest.mark.slow
@pytest.mark.parametrize("mode", ["group", "spill"])
def test_pixel_videos_longer_than_the_first_twenty(tmp_path, mode):
    """The estimate counts the first 20 videos' frames: 4 each; the next 10 have 600."""
    paths = write_frame_folder(tmp_path / "f", solid_frames(4, size=(8, 8)))
    short = [{"video_id": f"s{i}", "frames": paths} for i in range(20)]
    long = [{"video_id": f"l{i}", "frames": paths * 150} for i in range(10)]
    write_manifest(tmp_path / "wrong.jsonl", short + long)
    write_manifest(tmp_path / "right.jsonl", long + short)
    flags = ("--window", "4", "--stride", "2", "--frame_encoding", "raw")
    held, total, files = _run(str(tmp_path / "wrong.jsonl"), tmp_path / "wrong", mode,
                              BUDGET_MB, *flags)
    _run(str(tmp_path / "right.jsonl"), tmp_path / "right", mode, BUDGET_MB, *flags)
    _check(tmp_path / "wrong", tmp_path / "right", mode, held, total, files)
