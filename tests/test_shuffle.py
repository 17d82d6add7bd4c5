"""The shuffle and the shard writes: the transform on Beam's TestPipeline in both modes,
sorted files, and the shard plan against a reference."""
import collections
import os

import apache_beam as beam
import numpy as np
import pytest
import tensorflow as tf
from apache_beam.testing.test_pipeline import TestPipeline as BeamTestPipeline
from apache_beam.testing.util import assert_that, equal_to

from beam_jobs.core.records import KeyedExample, VideoCount
from beam_jobs.core.run_dir import RunDir
from beam_jobs.cut.config import CutConfig
from beam_jobs.cut.digest import FrameDigest
from beam_jobs.cut.examples import CutWindows
from beam_jobs.shuffle.config import ShuffleConfig
from beam_jobs.shuffle.plan import (
    BucketSpan,
    FileSpan,
    Segment,
    ShardTask,
    SortedFile,
    bucket_of,
    num_shards_for,
    plan_shards,
)
from beam_jobs.shuffle.sorted_files import SortedSlice, read_sorted, write_sorted
from beam_jobs.shuffle.write import WriteShuffledShards, segment_frames
from beam_jobs.sources.latents import LatentVideo
from readers import format as data_format
from readers.format.tfrecord import frame
from readers.format.windows import Window
from readers.format.writer import WindowRecord, shard_ranges


def _examples(seed: int, count: int = 101) -> list[KeyedExample]:
    rng = np.random.default_rng(seed)
    keys = [int(k) for k in rng.integers(0, 2 ** 63, count)]
    return [("train" if i % 4 else "test", WindowRecord(k, b"example-%d" % i, k % 7, i % 5))
            for i, k in enumerate(keys)]


def _shard_records(directory, split: str, shards: int = 4) -> list[bytes]:
    records = []
    for i in range(shards):
        path = os.path.join(directory, data_format.shard_name(split, i, shards, "none", "r1"))
        records += [r.numpy() for r in tf.data.TFRecordDataset(path)]
    return records


@pytest.mark.slow
@pytest.mark.parametrize("mode", ["spill", "group"])
@pytest.mark.parametrize("buckets", [1, 3, 50])
def test_shards_hold_every_example_in_key_order(tmp_path, mode, buckets):
    elements = _examples(buckets)
    run = RunDir(str(tmp_path / "out"), "r1", str(tmp_path / "tmp"))
    config = ShuffleConfig(splits=("train", "test"), num_shards=4, shard_bytes=1,
                         num_buckets=buckets, spill_bytes=300, mode=mode)
    with BeamTestPipeline(runner="FnApiRunner") as p:
        dropped = p | "NoneDropped" >> beam.Create([{}])
        written = (p | beam.Create(elements)
                   | WriteShuffledShards(run, config, beam.pvalue.AsSingleton(dropped)))
        counts = {"train": (18, 19, 19, 19), "test": (6, 7, 6, 7)}
        assert_that(written | beam.Map(lambda s: (s.split, s.shard.file, s.shard.examples)),
                    equal_to([(split, run.shard_name(split, i, 4, "none"), n)
                              for split, each in counts.items() for i, n in enumerate(each)]))
    for split in ("train", "test"):
        expected = sorted(e[1] for e in elements if e[0] == split)
        assert _shard_records(tmp_path / "out", split) == [r.example for r in expected]


@pytest.mark.slow
def test_both_modes_give_the_same_bytes_and_group_mode_one_file_per_bucket(tmp_path):
    """A spill after every element stands for Dataflow's tiny bundles: in spill mode it
    makes a temp file per element and split; group mode has no per-bundle state, so its
    temp files are one per bucket, whatever the bundling."""
    elements = _examples(7, count=60)
    dropped = {"train": frozenset({elements[1][1].key, elements[2][1].key})}
    for mode in ("spill", "group"):
        run = RunDir(str(tmp_path / mode), "r1", str(tmp_path / f"{mode}-tmp"))
        config = ShuffleConfig(splits=("train", "test"), num_shards=4, shard_bytes=1,
                             num_buckets=5, spill_bytes=1, mode=mode)
        with BeamTestPipeline(runner="FnApiRunner") as p:
            drop = p | "Dropped" >> beam.Create([dropped])
            _ = (p | beam.Create(elements)
                 | WriteShuffledShards(run, config, beam.pvalue.AsSingleton(drop)))
    temp = {mode: [f for _, _, files in os.walk(tmp_path / f"{mode}-tmp") for f in files]
            for mode in ("spill", "group")}
    assert len(temp["spill"]) == len(elements)       # one sorted file per element
    train_buckets = {bucket_of(e[1].key, 5) for e in elements if e[0] == "train"}
    test_buckets = {bucket_of(e[1].key, 5) for e in elements if e[0] == "test"}
    assert len(temp["group"]) == len(train_buckets) + len(test_buckets) <= 10
    for split in ("train", "test"):
        spill, group = (_shard_records(tmp_path / m, split) for m in ("spill", "group"))
        assert spill == group
        expected = sorted(e[1] for e in elements if e[0] == split
                          and e[1].key not in dropped.get(split, ()))
        assert spill == [r.example for r in expected]
        for mode in ("spill", "group"):   # each shard's window table: its records' facts
            tables = [_table(tmp_path / mode, data_format.shard_name(split, i, 4, "none", "r1"),
                             hi - lo) for i, (lo, hi) in enumerate(shard_ranges(len(expected), 4))]
            assert np.concatenate([table.videos for table in tables]).tolist() == [
                e.video for e in expected]
            assert np.concatenate([table.valid for table in tables]).tolist() == [
                e.valid for e in expected]


def _table(out, shard: str, records: int):
    """The window table of `shard` in `out`, of `records` records, decoded."""
    with open(os.path.join(out, data_format.table_name(shard)), "rb") as f:
        data = f.read()
    return data_format.window_table.decode(data, data_format.Shard(
        shard, records, table=data_format.table_name(shard),
        table_crc32c=data_format.window_table.crc32c(data)), 5)


def test_a_spill_that_cannot_be_written_fails_its_bundle(tmp_path):
    """Sorted files are written on a thread of their own while the next buffer fills: a
    write that fails there still fails the bundle, and so the run, with its error."""
    temp = tmp_path / "tmp"
    temp.mkdir()
    (temp / "spill").write_text("a file where the spill folder goes")
    run = RunDir(str(tmp_path / "out"), "r1", str(temp))
    config = ShuffleConfig(splits=("train", "test"), num_shards=2, shard_bytes=1,
                         num_buckets=3, spill_bytes=300, mode="spill")
    with pytest.raises(Exception, match=r"File exists: .*tmp/spill'"):
        with BeamTestPipeline(runner="FnApiRunner") as p:
            dropped = p | "NoneDropped" >> beam.Create([{}])
            _ = (p | beam.Create(_examples(3))
                 | WriteShuffledShards(run, config, beam.pvalue.AsSingleton(dropped)))
    assert not (tmp_path / "out").exists() or not os.listdir(tmp_path / "out")


def test_sorted_files_give_any_slice_from_their_index(tmp_path):
    rng = np.random.default_rng(3)
    records = sorted((int(rng.integers(0, 2**63)) * 2, os.urandom(n % 50),
                      int(rng.integers(0, 2**64, dtype=np.uint64)), n % 17) for n in range(300))
    path = str(tmp_path / "f.sorted")
    assert write_sorted(path, records) == (300, sum(len(r[1]) + 16 for r in records),
                                           os.path.getsize(path))
    for start, stop in ((0, 300), (0, 1), (17, 18), (150, 299), (299, 300), (5, 5)):
        assert list(read_sorted(path, start, stop)) == records[start:stop]
        piece = SortedSlice(path, start, stop)
        assert piece.keys == [r[0] for r in records[start:stop]]
        assert (piece.videos, piece.valid) == ([r[2] for r in records[start:stop]],
                                               [r[3] for r in records[start:stop]])
        assert list(piece.frames()) == [frame(r[1]) for r in records[start:stop]]
    with pytest.raises(OSError, match="not a sorted file of 301 records"):
        SortedSlice(path, 0, 301)


def test_a_frame_at_odds_with_its_index_fails_the_task(tmp_path):
    path = str(tmp_path / "f.sorted")
    write_sorted(path, [(1, b"abc", 0, 0), (2, b"defg", 0, 0)])
    with open(path, "r+b") as f:   # the first frame's length header says 4, not 3
        f.write(frame(b"abcd")[:12])
    with pytest.raises(OSError, match="at odds with the sorted file's index"):
        list(SortedSlice(path, 0, 2).frames())


def test_keys_tied_across_files_are_ordered_by_their_examples(tmp_path):
    """A 64-bit key collision between two spilled files: the shard holds the two examples
    in byte order, as one sort of all records (and group mode) would, each with its own
    video and valid frames (its window table's)."""
    for name, records in (("a", [(5, b"zz", 1, 2), (7, b"q", 3, 4)]),
                          ("b", [(5, b"aa", 5, 6), (6, b"m", 7, 8)])):
        write_sorted(str(tmp_path / name), records)
    segment = Segment(0, (FileSpan(str(tmp_path / "a"), 0, 2),
                          FileSpan(str(tmp_path / "b"), 0, 2)), 0, 4)
    assert list(segment_frames(segment, frozenset(), 1)) == [
        (frame(e), video, valid) for e, video, valid in (
            (b"aa", 5, 6), (b"zz", 1, 2), (b"m", 7, 8), (b"q", 3, 4))]
    dropped = list(segment_frames(segment._replace(lo=1, hi=3), frozenset({6}), 1))
    assert dropped == [(frame(b"zz"), 1, 2), (frame(b"q"), 3, 4)]


def _plan(files, splits, num_buckets, num_shards=None, shard_bytes=1, dropped=None):
    return plan_shards(files, splits, num_buckets, num_shards, shard_bytes, dropped or {})


def test_plan_cuts_ranks_across_buckets_evenly():
    files = [SortedFile("train", "r0", (BucketSpan(0, 0, 3, 30), BucketSpan(2, 3, 7, 70))),
             SortedFile("train", "r1", (BucketSpan(0, 0, 2, 20), BucketSpan(3, 2, 1, 10))),
             SortedFile("train", "r2", (BucketSpan(3, 0, 2, 20),))]
    tasks = _plan(files, ("train", "empty"), 4, num_shards=3)
    assert [t.index for t in tasks] == [0, 1, 2] and all(t.num_shards == 3 for t in tasks)
    assert [sum(s.hi - s.lo for s in t.segments) for t in tasks] == [5, 5, 5]
    assert tasks[0].segments == (Segment(0, (("r0", 0, 3), ("r1", 0, 2)), 0, 5),)
    assert tasks[1].segments == (Segment(2, (("r0", 3, 7),), 0, 5),)
    assert tasks[2].segments == (Segment(2, (("r0", 3, 7),), 5, 7),
                                 Segment(3, (("r1", 2, 1), ("r2", 0, 2)), 0, 3))
    assert len(_plan(files, ("train",), 4, shard_bytes=40)) == 4  # 150 bytes / 40 a shard


def _digest(frames) -> str:
    """A video's digest, its frames given one at a time (the cut takes a latent
    sequence whole: both give the same)."""
    digest = FrameDigest()
    for one in frames:
        digest.add(one)
    return digest.hexdigest()


def test_a_video_is_known_by_its_frames_labels_and_metadata():
    frames = np.arange(12, dtype=np.float32).reshape(6, 2)
    whole = FrameDigest()
    whole.add_sequence(frames)
    assert whole.hexdigest() == _digest(frames)
    assert _digest(frames[:5]) != _digest(frames) != _digest(frames[::-1])
    assert _digest(frames.astype(np.float64)) != _digest(frames)
    labelled = [FrameDigest(), FrameDigest(), FrameDigest(np.ones(2, np.float32))]
    for i, one in enumerate(frames):
        labelled[0].add(one, label=np.float32(i))
        labelled[1].add(one, label=np.float32(-i))
        labelled[2].add(one, label=np.float32(i))
    assert len({d.hexdigest() for d in labelled} | {_digest(frames)}) == 4
    masked = FrameDigest()
    for i, one in enumerate(frames):
        masked.add(one, valid=i != 3)
    assert masked.hexdigest() != _digest(frames)


def test_cut_windows_keys_and_counts():
    features = data_format.window_features(data_format.FeatureSpec.for_array("window", (4, 2),
                                                                       "float32"))
    video = LatentVideo("v", np.arange(20, dtype=np.float32).reshape(10, 2), None)
    short = LatentVideo("s", np.zeros((3, 2), np.float32), None)
    with BeamTestPipeline(runner="FnApiRunner") as p:
        out = (p | beam.Create([video, short])
               | CutWindows(features, CutConfig(Window(4, 3, "align_end"),
                                                {"train": 1.0})))
        digests = [_digest(video.sequence), _digest(short.sequence)]
        assert_that(out.videos, equal_to([VideoCount("train", 3, 0, 10, "v", digest=digests[0]),
                                          VideoCount("train", 0, 0, 3, "s", digest=digests[1])]),
                    label="Counts")
        sums = out.stats | beam.Map(lambda s: (s.split, s.key, s.sums["window"].frames,
                                               s.sums["window"].total.tolist()))
        first = CutConfig(Window(4, 3, "align_end"), {"train": 1.0}).key("v", 0)
        assert_that(sums, equal_to([("train", first, 10, [90.0, 100.0])]),
                    label="Sums")   # the short video stores no frame: no row
        starts = out.examples | beam.Map(
            lambda e: tf.train.Example.FromString(e[1].example).features.feature["start"]
            .int64_list.value[0])
        assert_that(starts, equal_to([0, 3, 6]), label="Starts")


def _reference_plan(files, config, dropped):
    """plan_shards by definition: every record's rank, then each shard's slice of them."""
    tasks = []
    for split in config.splits:
        per_bucket = collections.defaultdict(list)
        for f in files:
            if f.split == split:
                for bucket, first, count, _ in f.buckets:
                    per_bucket[bucket].append((f.path, first, count))
        drop = dropped.get(split, frozenset())
        kept = {b: sum(c for _, _, c in spans)
                - sum(bucket_of(k, config.num_buckets) == b for k in drop)
                for b, spans in per_bucket.items()}
        ranks = [b for b in sorted(kept) for _ in range(kept[b])]   # the bucket of each rank
        if not ranks:
            continue
        nbytes = sum(s for f in files if f.split == split for *_, s in f.buckets)
        n = num_shards_for(len(ranks), nbytes, config.num_shards, config.shard_bytes)
        start = {b: ranks.index(b) for b in kept if kept[b] > 0}
        for i in range(n):
            lo, hi = i * len(ranks) // n, (i + 1) * len(ranks) // n
            overlapping = sorted(set(ranks[lo:hi]))
            tasks.append(ShardTask(split, i, n, tuple(
                Segment(b, tuple(sorted(per_bucket[b])), max(lo - start[b], 0),
                        min(hi - start[b], kept[b])) for b in overlapping),
                frozenset(k for k in drop if bucket_of(k, config.num_buckets) in overlapping),
                len(ranks)))
    return tasks


@pytest.mark.parametrize("seed", range(40))
def test_plan_matches_the_reference_on_random_sorted_files(seed):
    rng = np.random.default_rng(seed)
    num_buckets = int(rng.integers(1, 12))
    files, keys = [], collections.defaultdict(list)
    for r in range(int(rng.integers(1, 5))):
        for split in ("train", "val"):
            rows, at = [], 0
            for b in sorted(rng.choice(num_buckets, int(rng.integers(0, num_buckets + 1)),
                                       replace=False)):
                count = int(rng.integers(1, 6))
                low = -(-(int(b) << 64) // num_buckets)
                keys[split] += [low + int(rng.integers(0, 2**40)) for _ in range(count)]
                rows.append(BucketSpan(int(b), at, count, 10 * count))
                at += count
            files.append(SortedFile(split, f"{split}-f{r}", tuple(rows)))
    dropped = {split: frozenset(ks[j] for j in rng.permutation(len(ks))[
        :int(rng.integers(0, len(ks) + 1))]) for split, ks in keys.items()}
    config = ShuffleConfig(splits=("train", "val"),
                         num_shards=int(rng.integers(1, 9)) if seed % 2 else None,
                         shard_bytes=int(rng.integers(5, 60)), num_buckets=num_buckets)
    assert (plan_shards(files, config.splits, num_buckets, config.num_shards,
                        config.shard_bytes, dropped) == _reference_plan(files, config, dropped))


def test_a_spill_buffer_counts_what_its_records_hold():
    """--spill_buffer_mb bounds a worker's memory for records of any size: a planned
    record's Python objects, not its 16 bytes, are most of what it holds in a buffer."""
    import tracemalloc

    from beam_jobs.core.records import planned
    from beam_jobs.shuffle.write import HELD_PER_RECORD

    tracemalloc.start()
    before = tracemalloc.get_traced_memory()[0]
    buffer = [(2**63 + i, planned(2**63 + i, 80_016), 2**62 + i, 100) for i in range(10_000)]
    held = (tracemalloc.get_traced_memory()[0] - before) / len(buffer)
    tracemalloc.stop()
    assert len(buffer[0][1]) + HELD_PER_RECORD >= held > HELD_PER_RECORD / 2, held
