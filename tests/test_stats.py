"""The dataset's statistics (dataset.json's `stats`, readers/format/channel_stats.py): what
the job records equals numpy over the stored frames, read back from the shards (every
window, frames deduplicated by video and index, mask 1), for each kind of dataset and
across an --append that skips a copy; old datasets without them still read and say so;
NaN is said, never hidden; dataset.json's figures are checked; normalising works on
numpy arrays, in a tf.data map and on torch tensors."""
import json
import os
import re
import shutil

import numpy as np
import pytest
from helpers import docs_code, inspect_run, read_dataset_json, read_examples, run_job
from input_files import (
    latent_example,
    random_videos,
    write_frame_folder,
    write_manifest,
    write_records,
    write_videos,
)

import readers
from readers import format as data_format
from readers.format.channel_stats import ChannelStats


def stored_frames(out, split: str) -> dict[str, np.ndarray]:
    """{feature: [frames, ...]} of the window and label values of every frame the split
    stores, once each by (video id, frame index), mask 1; a frame two windows hold must
    be the same in both."""
    seen: dict = {}
    for example in read_examples(out, split):
        for i in np.flatnonzero(example["mask"] == 1):
            frame = {name: example[name][i] for name in ("window", "labels") if name in example}
            key = (example["video_id"], int(example["start"]) + int(i))
            if key in seen:
                assert all(np.array_equal(seen[key][n], frame[n]) for n in frame), key
            seen[key] = frame
    return {name: np.stack([f[name] for f in seen.values()]) if seen else None
            for name in ("window", "labels") if name in next(iter(seen.values()), {name: 0})}


def assert_statistics_of(stats: ChannelStats, values, frames: int = None) -> None:
    """`stats` are numpy's over `values` [frames, ..., C] (or [frames]: one channel)."""
    if values is None:
        assert stats.frames == stats.count == 0 and np.isnan(stats.mean).all()
        return
    x = np.asarray(values).astype(np.float64)
    rows = x.reshape(-1, 1) if x.ndim == 1 else x.reshape(-1, x.shape[-1])
    assert (stats.frames, stats.count, stats.channels) == (len(x) if frames is None else frames,
                                                           len(rows), rows.shape[1])
    scale = np.abs(rows).max()
    np.testing.assert_allclose(stats.mean, rows.mean(axis=0), rtol=1e-12, atol=1e-13 * scale)
    np.testing.assert_allclose(stats.std, rows.std(axis=0), rtol=1e-9, atol=1e-12 * scale)
    np.testing.assert_array_equal(stats.min, rows.min(axis=0))
    np.testing.assert_array_equal(stats.max, rows.max(axis=0))


def assert_statistics_are_the_stored_frames_s(out) -> None:
    spec = data_format.load_spec(str(out))
    assert set(spec.stats) == set(spec.splits)
    for split, features in spec.stats.items():
        frames = stored_frames(out, split)
        assert set(features) == {n for n in ("window", "labels") if n in
                                 [f.name for f in spec.features]}
        for name, stats in features.items():
            assert_statistics_of(stats, frames[name])


@pytest.mark.parametrize("kind", ["latent", "gzip", "float16", "bfloat16", "long", "raw", "png"])
def test_statistics_are_numpy_s_over_the_stored_frames(kinds, kind):
    assert_statistics_are_the_stored_frames_s(kinds[kind])
    if kind == "latent":   # a split of no video: its figures are null, and say so
        empty = data_format.load_spec(kinds[kind]).stats["empty"]["window"]
        assert (empty.frames, empty.count, empty.finite) == (0, 0, False)
        assert read_dataset_json(kinds[kind])["stats"]["empty"]["window"]["mean"] == [None] * 3


def test_jpeg_statistics_are_of_the_pixels_before_compression(kinds):
    """Exact against the source frames (PNG files, stored as JPEG); the decoded JPEG's
    differ by its compression (docs/format.md has the gap on realistic frames)."""
    from PIL import Image

    root = os.path.dirname(kinds["jpeg"])
    spec = data_format.load_spec(kinds["jpeg"])
    for split, features in spec.stats.items():
        keys = set()
        for example in read_examples(kinds["jpeg"], split):
            keys |= {(example["video_id"], int(example["start"]) + int(i))
                     for i in np.flatnonzero(example["mask"] == 1)}
        source = np.stack([np.asarray(Image.open(os.path.join(root, video, f"frame_{i}.png")))
                           for video, i in sorted(keys)]) if keys else None
        assert_statistics_of(features["window"], source)
        decoded = stored_frames(kinds["jpeg"], split)["window"]
        if decoded is not None:   # pixel noise, JPEG's worst case: its std falls by a third
            rows = decoded.reshape(-1, 3).astype(np.float64)
            assert np.abs(features["window"].mean - rows.mean(axis=0)).max() < 1.0


def test_masked_and_overlapping_frames_and_an_append_count_each_frame_once(tmp_path, capsys):
    """PNG frames with a label each, a missing frame, windows of 5 every 3 (overlapping,
    a padded tail); then an --append of two videos and a copy of an old one's frames
    under a new id (skipped: its frames must not count twice)."""
    rng = np.random.default_rng(3)
    rows = []

    def video(name: str, length: int, frames=None) -> list:
        frames = list(rng.integers(0, 256, (length, 6, 8, 3), np.uint8)) if frames is None \
            else frames
        write_frame_folder(tmp_path / name, frames)
        rows.append({"video_id": name, "frames": [f"{name}/frame_{i}.png" for i in range(length)],
                     "labels": [float(100 + 10 * t * (len(rows) + 1)) for t in range(length)]})
        return frames

    first = [video(f"v{i}", 9 + 2 * i) for i in range(4)]
    os.remove(tmp_path / "v1" / "frame_4.png")
    write_manifest(tmp_path / "a.jsonl", rows)
    flags = ["--window", "5", "--stride", "3", "--tail", "pad", "--frame_encoding", "png",
             "--splits", "train=0.5,val=0.5", "--on_bad_frame", "mask", "--append"]
    run_job(str(tmp_path / "a.jsonl"), tmp_path / "out", *flags)
    assert_statistics_are_the_stored_frames_s(tmp_path / "out")
    before = data_format.load_spec(str(tmp_path / "out"))
    assert sum(s["window"].frames for s in before.stats.values()) == sum(
        s.frames - s.bad_frames for s in before.splits.values())   # overlaps counted once

    rows.clear()
    video("w0", 8), video("w1", 12)
    video("copy_of_v2", 13, first[2])   # v2's frames and labels (its labels: rows[2]'s)
    rows[-1]["labels"] = [float(100 + 10 * t * 3) for t in range(13)]
    write_manifest(tmp_path / "b.jsonl", rows)
    run_job(str(tmp_path / "a.jsonl"), tmp_path / "out", *flags, "--input",
            str(tmp_path / "b.jsonl"))
    after = data_format.load_spec(str(tmp_path / "out"))
    # skipped: v0 to v3 (their ids) and the copy (v2's frames)
    assert len(after.generations) == 2 and after.generations[1].skipped_existing == 5
    assert_statistics_are_the_stored_frames_s(tmp_path / "out")
    assert sum(s["window"].frames for s in after.stats.values()) == sum(
        s["window"].frames for s in before.stats.values()) + 8 + 12


def _copy_without_statistics(source: str, to) -> None:
    shutil.copytree(source, to)
    meta = read_dataset_json(to)
    del meta["stats"]
    (to / "dataset.json").write_text(json.dumps(meta, indent=2))


def test_an_old_dataset_without_statistics_reads_says_so_and_an_append_keeps_none(
        kinds, tmp_path, capsys):
    _copy_without_statistics(kinds["latent"], tmp_path / "old")
    spec = readers.load_spec(str(tmp_path / "old"))
    assert spec.stats == {} and "stats" not in json.loads(spec.to_json())
    code, out, err = inspect_run(capsys, tmp_path / "old", "--stats", "--verify")
    assert code == 0, err
    said = [line for line in out.splitlines() if line.startswith("statistics: none")]
    assert len(said) == 2 and "rebuild" in said[0]   # the summary's line, and --stats'
    assert "statistics of" in out                    # the sample still follows
    # An append knows only its new frames: it records none, never those as the dataset's.
    root = os.path.dirname(kinds["latent"])
    shutil.copytree(os.path.join(root, "lat"), tmp_path / "in")
    write_videos(str(tmp_path / "new"), random_videos(np.random.default_rng(8), 3), files=1)
    shutil.copy(tmp_path / "new" / "lat-0.tfrecord", tmp_path / "in" / "new.tfrecord")
    run_job(str(tmp_path / "in" / "*"), tmp_path / "old", "--window", "4", "--stride", "2",
            "--splits", "train=0.6,test=0.39,empty=0.01", "--num_shards", "2", "--append")
    appended = readers.load_spec(str(tmp_path / "old"))
    assert len(appended.generations) == 2 and appended.stats == {}


def test_nan_in_the_frames_makes_the_statistics_nan_and_inspect_says_so(tmp_path, capsys):
    frames = np.arange(24, dtype=np.float32).reshape(12, 2)
    bad = frames.copy()
    bad[5, 1] = np.nan
    write_records(str(tmp_path / "in" / "a.tfrecord"),
                  [latent_example(frames, [0.0]), latent_example(bad + 1, [1.0])])
    run_job(str(tmp_path / "in" / "*"), tmp_path / "out", "--window", "4",
            "--allow_nonfinite")
    stats = readers.load_spec(str(tmp_path / "out")).stats["train"]["window"]
    assert not stats.finite and np.isnan(stats.mean[1]) and np.isnan(stats.std[1])
    assert_statistics_of(dataclass_channel(stats, 0), np.concatenate([frames, bad + 1])[:, 0])
    assert read_dataset_json(tmp_path / "out")["stats"]["train"]["window"]["mean"][1] is None
    code, out, err = inspect_run(capsys, tmp_path / "out", "--stats")
    assert code == 0 and "the frames hold NaN or Inf (kept by --allow_nonfinite)" in out, err


def dataclass_channel(stats: ChannelStats, c: int) -> ChannelStats:
    """One channel of `stats`."""
    return ChannelStats(stats.frames, stats.count, *(getattr(stats, f)[c:c + 1]
                                                     for f in ("mean", "m2", "min", "max")))


@pytest.mark.parametrize("change, said", [
    (lambda s: s["train"]["window"]["mean"].pop(), "stats.train.window.mean: 2 values"),
    (lambda s: s["train"]["window"].update(count=1), "stats.train.window.count: 1, not"),
    (lambda s: s["train"]["window"]["std"].__setitem__(0, 9.0), "stats.train.window.std"),
    (lambda s: s["train"]["window"]["m2"].__setitem__(0, -1.0), "stats.train.window.m2"),
    (lambda s: s["train"]["window"]["mean"].__setitem__(0, 1e9), "stats.train.window.mean"),
    (lambda s: s["train"]["window"]["min"].__setitem__(0, "0"), "is not a number or null"),
    (lambda s: s["train"]["window"].update(frames=10**6, count=10**6), "more than the split's"),
    (lambda s: s.pop("test"), "stats: splits"),
    (lambda s: s["train"].update(labels=s["train"]["window"]), "stats.train: features"),
    (lambda s: s["train"]["window"]["mean"].__setitem__(0, float("nan")), "not JSON (NaN "),
    (lambda s: _set(s, m2=np.inf, std=np.inf), "not JSON (Infinity "),
    (lambda s: _set(s, m2="1e400"), "stats.train.window.m2[0]: Infinity is not a finite"),
    (lambda s: _set(s, min=10**400), "stats.train.window.min[0]: 1000000000"),
    (lambda s: _set(s, mean=None), "stats.train.window.m2[0]: a number where mean[0] is null"),
    (lambda s: _set(s, max=None), "stats.train.window.mean[0]: a number where max[0] is null"),
    (lambda s: _set(s, m2=None), "stats.train.window.std[0]: a number where m2[0] is null"),
    (lambda s: _set(s, m2=1e300, std=1e300 ** 0.5 / 209 ** 0.5), "stats.train.window.m2"),
    (lambda s: _set(s, std=s["train"]["window"]["std"][0] * (1 + 1e-8)),
     "stats.train.window.std"),
    (lambda s: s["train"]["window"].update(frames=10**400, count=10**400),
     "stats.train.window.frames: 100000000000"),
])
def test_dataset_json_s_statistics_are_checked(kinds, change, said):
    """Each a SpecError of one line naming the field: NaN and Infinity are no JSON (the
    job writes null), every figure where counted a finite number, null spread as the job
    writes it, std**2 = m2 / count within 1e-9, m2 / count within Popoviciu's bound
    ((max - min) / 2)**2, every count an int64."""
    meta = read_dataset_json(kinds["latent"])
    change(meta["stats"])
    with pytest.raises(data_format.SpecError, match=re.escape(said)) as e:
        data_format.DatasetSpec.from_json(json.dumps(meta).replace('"1e400"', "1e400"))
    assert "\n" not in str(e.value)


def _set(stats: dict, **figures) -> None:
    """Channel 0's figures of the train split's window statistics set to `figures`."""
    for name, value in figures.items():
        stats["train"]["window"][name][0] = value


def test_what_the_job_may_write_loads(kinds):
    """Rounding within the tolerance, a std of 0, a figure past float64's range (null
    m2 and std beside a number mean), frames with NaN (null figures, min and max as
    seen) all load."""
    meta = read_dataset_json(kinds["latent"])
    entry = meta["stats"]["train"]["window"]
    entry["std"][0] *= 1 + 1e-11
    entry["m2"][1] = entry["std"][1] = None
    entry["mean"][2] = entry["m2"][2] = entry["std"][2] = entry["max"][2] = None
    constant = meta["stats"]["test"]["window"]
    constant["min"][0] = constant["max"][0] = constant["mean"][0] = 0.5
    constant["m2"][0] = constant["std"][0] = 0.0
    stats = data_format.DatasetSpec.from_json(json.dumps(meta)).stats
    assert np.isnan(stats["train"]["window"].std[1:]).all()
    assert not np.isnan(stats["train"]["window"].mean[1]) and stats["test"]["window"].std[0] == 0


def test_impossible_counts_are_one_line_from_inspect_and_both_readers(kinds, tmp_path, capsys):
    out = shutil.copytree(kinds["latent"], tmp_path / "out")
    meta = read_dataset_json(out)
    meta["splits"]["train"]["frames"] = meta["stats"]["train"]["window"]["frames"] = \
        meta["stats"]["train"]["window"]["count"] = 10**400
    (out / "dataset.json").write_text(json.dumps(meta))
    said = f"{out / 'dataset.json'}: splits.train.frames: 1000000000"
    for argv in ((), ("--verify",)):
        code, _, err = inspect_run(capsys, out, *argv)
        assert code == 2 and said in err and "Traceback" not in err, err
    from readers.numpy import WindowSource

    for read in (readers.make_dataset, WindowSource):
        with pytest.raises(data_format.SpecError, match=re.escape(said)):
            read(str(out), "train")


def test_statistics_round_trip_and_merge_as_one_set_of_frames(rng):
    x = rng.standard_normal((50, 4)) * 3 + 1000
    parts = [_numpy_stats(x[:7]), _numpy_stats(x[7:30]), _numpy_stats(x[30:])]
    merged = parts[0].merge(parts[1]).merge(parts[2])     # Chan et al.: an --append's
    assert_statistics_of(merged, x)
    assert_statistics_of(ChannelStats.empty(4).merge(merged).merge(ChannelStats.empty(4)), x)
    entry = merged.to_json()
    assert json.loads(json.dumps(entry)) == entry and entry["count"] == 50


def test_videos_sums_are_added_exactly_whatever_their_order_and_batches(rng, monkeypatch):
    """SplitStatsFn adds videos' float64 sums a batch at a time (vectorised, int64 per
    binary exponent; values of scales far apart one by one): the totals are the exact
    ones (Python's Fraction), the figures rounded once from them, and any split into
    accumulators, any order and any merge give the same figures, bit for bit."""
    from fractions import Fraction

    from beam_jobs.commit.split_stats import SplitStatsFn
    from readers.format import moments
    from readers.format.moments import VideoMoments, _exact_column_sums

    def exact(values):
        return [sum(int(Fraction(float(v)) * 2 ** 1074) for v in column)
                for column in values.T]
    narrow = np.stack([rng.standard_normal(2100) * 1e3, rng.standard_normal(2100) * 1e-3,
                       np.full(2100, 2.0 - 2.0 ** -52),   # 2,100 such overflow an int64
                       rng.choice([0.0, -0.0, 5e-324, -3e-320, 1e-310], 2100)], axis=1)
    wide = rng.standard_normal((300, 3)) * 10.0 ** rng.integers(-300, 300, (300, 3))
    for most in (moments._MOST_DISTANCES, 0):     # the batched way, and one by one
        monkeypatch.setattr(moments, "_MOST_DISTANCES", most)
        assert _exact_column_sums(narrow) == exact(narrow)   # int64, 1,023 rows at a time
        assert _exact_column_sums(wide) == exact(wide)
    monkeypatch.undo()

    def video(i: int) -> dict:
        frames = rng.standard_normal((int(rng.integers(1, 9)), 3)) * 10.0 ** (i % 7 - 3) + i
        if i == 5:
            frames[0, 1] = np.nan                    # said as NaN, the rest kept exact
        return {"window": VideoMoments.of_values(frames)}
    videos = [video(i) for i in range(700)]          # past the 256 a batch holds
    fn = SplitStatsFn()

    def combined(order, cuts):
        accumulators = []
        for part in np.split(np.asarray(order), cuts):
            accumulator = fn.create_accumulator()
            for i in part:
                accumulator = fn.add_input(accumulator, videos[i])
            accumulators.append(fn.compact(accumulator) if len(accumulators) % 2 else
                                accumulator)
        return fn.extract_output(fn.merge_accumulators(accumulators))["window"]
    first = combined(range(700), [])
    for _ in range(3):
        other = combined(rng.permutation(700), sorted(rng.choice(700, 4, replace=False)))
        for a, b in zip(first.to_json().values(), other.to_json().values(), strict=True):
            assert json.dumps(a) == json.dumps(b)
    sums = [v["window"] for v in videos]
    n = sum(v.count for v in sums)
    assert first.count == n and first.frames == sum(v.frames for v in sums)
    for channel in (0, 2):                           # each figure rounded once, exactly
        total = sum(Fraction(float(v.total[channel])) for v in sums)
        squares = sum(Fraction(float(v.squares[channel])) for v in sums)
        assert first.mean[channel] == float(total / n)
        assert first.m2[channel] == float(squares - total * total / n)
        assert first.min[channel] == min(v.low[channel] for v in sums)
        assert first.max[channel] == max(v.high[channel] for v in sums)
    assert np.isnan(first.mean[1]) and np.isnan(first.m2[1])


def _numpy_stats(x: np.ndarray) -> ChannelStats:
    mean = x.mean(axis=0)
    return ChannelStats(len(x), len(x), mean, ((x - mean) ** 2).sum(axis=0), x.min(axis=0),
                        x.max(axis=0))


def test_normalize_on_numpy_in_a_tf_data_map_and_on_torch(kinds):
    import tensorflow as tf
    import torch

    path = kinds["raw"]
    stats = readers.load_spec(path).stats["train"]
    window, labels = stats["window"], stats["labels"]
    ds = readers.make_dataset(path, "train", batch_size=2, shuffle=False,
                              drop_remainder=False)
    mapped = ds.map(lambda b: {**b, "window": window.normalize(b["window"]),
                               "labels": labels.normalize(b["labels"])})
    for raw, done in zip(ds, mapped, strict=True):
        pixels, label_values = raw["window"].numpy(), raw["labels"].numpy()
        expected = (pixels.astype(np.float32) - window.mean.astype(np.float32)) / \
            window.std.astype(np.float32)
        assert done["window"].dtype == tf.float32
        np.testing.assert_allclose(done["window"].numpy(), expected, rtol=1e-6)
        np.testing.assert_allclose(window.normalize(pixels), expected, rtol=1e-6)
        np.testing.assert_allclose(labels.normalize(torch.from_numpy(label_values)).numpy(),
                                   done["labels"].numpy(), rtol=1e-6)
        np.testing.assert_allclose(labels.denormalize(done["labels"].numpy()), label_values,
                                   rtol=1e-5, atol=1e-4)
    assert labels.normalize(np.ones((4, 2), np.float64)).dtype == np.float64
    constant = ChannelStats(3, 3, np.array([2.0]), np.array([0.0]), np.array([2.0]),
                            np.array([2.0]), channel_axis=False)
    assert constant.normalize(np.array([2.0, 3.0])).tolist() == [0.0, 1.0]   # shifted only
    with pytest.raises(ValueError, match="these statistics have 3 channels"):
        window.normalize(np.zeros((2, 4)))


def test_normalize_computes_in_float32_or_wider_and_knows_its_channel_axis(kinds):
    """float16 and bfloat16 values are normalised in float32 (a std of 1e-9 gives no
    inf), float64 in float64; a std of 0, or one too small for the dtype computed in, only
    shifts; statistics of one channel refuse values of three, but those of scalar frames
    (a label [L]) apply to values of any shape."""
    import tensorflow as tf
    import torch

    narrow = ChannelStats(2, 2, np.array([0.0]), np.array([2e-18]), np.array([-1e-9]),
                          np.array([1e-9]))                              # std 1e-9
    x = np.array([[0.5], [-1.0]], np.float16)
    for values, dtype in ((x, np.float32), (torch.from_numpy(x), torch.float32),
                          (tf.constant(x), tf.float32), (tf.cast(x, tf.bfloat16), tf.float32),
                          (x.astype(np.float64), np.float64)):
        done = narrow.normalize(values)
        assert done.dtype == dtype
        np.testing.assert_allclose(np.asarray(done), [[5e8], [-1e9]], rtol=1e-6)
        assert np.asarray(narrow.denormalize(done)).dtype == np.asarray(done).dtype
    for m2 in (0.0, 1e-100):                        # 1e-50 is 0 in float32: shifted only
        flat = ChannelStats(2, 2, np.array([0.5]), np.array([m2]), np.array([0.5]),
                            np.array([0.5]))
        for values in (x, torch.from_numpy(x), tf.constant(x)):
            assert np.asarray(flat.normalize(values)).tolist() == [[0.0], [-1.5]]
    with pytest.raises(ValueError, match="the last axis of the values is 3 long; these "
                                         "statistics have 1 channel"):
        narrow.normalize(np.zeros((2, 3)))
    meta = read_dataset_json(kinds["raw"])                 # its labels, one a frame
    (labels,) = [f for f in meta["features"] if f["name"] == "labels"]
    labels["shape"] = labels["shape"][:1]
    for split in meta["stats"].values():
        entry = split["labels"]
        entry.update({name: entry[name][:1] for name in ("mean", "std", "min", "max", "m2")})
    stats = data_format.DatasetSpec.from_json(json.dumps(meta)).stats["train"]
    assert stats["labels"].normalize(np.zeros((2, 3))).shape == (2, 3)
    assert stats["window"].channel_axis and not stats["labels"].channel_axis


def test_the_docs_transform_normalises_pixels_and_labels_in_the_reader(kinds, tmp_path,
                                                                       monkeypatch):
    """readers.md's block for the fire regressor, over a dataset of pixels and labels."""
    from readers.numpy import WindowSource

    shutil.copytree(kinds["raw"], tmp_path / "out")
    monkeypatch.chdir(tmp_path)
    scope: dict = {}
    exec(docs_code("readers.md", "Normalising with the dataset's statistics", 1), scope)
    stats = readers.load_spec("out/").stats["train"]
    raw = WindowSource("out/", "train")[0:2]
    np.testing.assert_allclose(scope["batch"]["window"], stats["window"].normalize(raw["window"]))
    np.testing.assert_allclose(scope["batch"]["labels"], stats["labels"].normalize(raw["labels"]))
    np.testing.assert_allclose(scope["labels"], raw["labels"], rtol=1e-6, atol=1e-5)
