"""The shuffled shard writer as a Beam transform, on Beam's TestPipeline."""

import apache_beam as beam
import numpy as np
import pytest
import tensorflow as tf
from apache_beam.testing.test_pipeline import TestPipeline as BeamTestPipeline
from apache_beam.testing.util import assert_that, equal_to

from beam_jobs.examples import CutWindows, KeyedExample, VideoCount, VIDEO_COUNTS, WindowConfig
from beam_jobs.output_dir import RunDir
from beam_jobs.shard_writer import BucketFile, ShardConfig, WriteShuffledShards, plan_shards
from beam_jobs.sources.latents import LatentVideo
from readers import spec as spec_lib


@pytest.mark.parametrize("buckets", [1, 3, 50])
def test_shards_hold_every_example_in_key_order(tmp_path, buckets):
    rng = np.random.default_rng(buckets)
    keys = [int(k) for k in rng.integers(0, 2 ** 63, 101)]
    elements = [KeyedExample("train" if i % 4 else "test", k, b"example-%d" % i)
                for i, k in enumerate(keys)]
    run = RunDir(str(tmp_path / "out"), "r1", str(tmp_path / "tmp"))
    config = ShardConfig(("train", "test"), "none", num_shards=4, shard_bytes=1,
                         num_buckets=buckets, spill_bytes=300)
    with BeamTestPipeline(runner="FnApiRunner") as p:
        dropped = p | "NoneDropped" >> beam.Create([{}])
        written = (p | beam.Create(elements)
                   | WriteShuffledShards(run, config, beam.pvalue.AsSingleton(dropped)))
        assert_that(written | beam.Map(lambda s: (s.split, s.index, s.examples)), equal_to(
            [("train", 0, 18), ("train", 1, 19), ("train", 2, 19), ("train", 3, 19),
             ("test", 0, 6), ("test", 1, 7), ("test", 2, 6), ("test", 3, 7)]))
    for split in ("train", "test"):
        records = []
        for i in range(4):
            path = tmp_path / "out" / spec_lib.shard_name(split, i, 4, "none")
            records += [r.numpy() for r in tf.data.TFRecordDataset(str(path))]
        expected = sorted((e for e in elements if e.split == split), key=lambda e: e.key)
        assert records == [e.example for e in expected]


def test_plan_cuts_ranks_across_buckets_evenly():
    files = [BucketFile("train", b, f"b{b}-{j}", c, 10 * c)
             for b, counts in enumerate([[3, 2], [0], [7], [1, 1, 1]]) for j, c in enumerate(counts)]
    tasks = list(plan_shards(files, ShardConfig(("train", "empty"), num_shards=3,
                                                shard_bytes=1, num_buckets=4), {}))
    assert [t.index for t in tasks] == [0, 1, 2] and all(t.num_shards == 3 for t in tasks)
    sizes = [sum(hi - lo for _, lo, hi in t.segments) for t in tasks]
    assert sizes == [5, 5, 5]
    assert tasks[0].segments == ((("b0-0", "b0-1"), 0, 5),)
    assert tasks[1].segments == ((("b2-0",), 0, 5),)
    assert tasks[2].segments == ((("b2-0",), 5, 7), (("b3-0", "b3-1", "b3-2"), 0, 3))
    by_size = list(plan_shards(files, ShardConfig(("train",), shard_bytes=40,
                                                  num_buckets=4), {}))
    assert len(by_size) == 4  # 150 bytes / 40 per shard


def test_cut_windows_keys_and_counts():
    features = spec_lib.window_features(spec_lib.FeatureSpec.for_array("window", (4, 2),
                                                                       "float32"))
    video = LatentVideo("v", np.arange(20, dtype=np.float32).reshape(10, 2), None)
    short = LatentVideo("s", np.zeros((3, 2), np.float32), None)
    with BeamTestPipeline(runner="FnApiRunner") as p:
        out = (p | beam.Create([video, short])
               | beam.ParDo(CutWindows(features, WindowConfig(4, 3, "align_end", {"train": 1.0})))
               .with_outputs(VIDEO_COUNTS, main="examples"))
        assert_that(out[VIDEO_COUNTS], equal_to([VideoCount("train", 3, 0, 10, "v"),
                                                  VideoCount("train", 0, 0, 3, "s")]),
                    label="Counts")
        starts = out.examples | beam.Map(
            lambda e: tf.train.Example.FromString(e.example).features.feature["start"]
            .int64_list.value[0])
        assert_that(starts, equal_to([0, 3, 6]), label="Starts")
