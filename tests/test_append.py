"""--append: new videos join a committed dataset as a new generation of shards; the videos
it has are skipped unread; earlier shards never change; every reader reads the union,
which holds what a full build of the same inputs holds."""
import dataclasses
import json
import os
import shutil
import signal
import types

import numpy as np
import pytest
from helpers import (
    assert_verified,
    dataset_bytes,
    job_line,
    read_dataset_json,
    read_examples,
    run_job,
    sidecar,
    start_job,
)
from input_files import (
    latent_example,
    random_videos,
    solid_frames,
    write_frame_folder,
    write_manifest,
    write_records,
)

import readers
from beam_jobs import make_shards
from beam_jobs.commit import append
from beam_jobs.commit import videos_file as committed_videos_file
from beam_jobs.job.errors import Failed, Refused
from beam_jobs.sources.tfrecords import PagedRecord
from readers.format import SpecError, load_spec, tfds_info, videos_file
from readers.numpy import WindowSource

FLAGS = ["--window", "8", "--stride", "4", "--splits", "train=0.75,val=0.25",
         "--id_feature", "vid", "--num_shards", "2"]
SPLITS = ("train", "val")


def _write(path, videos, prefix):
    write_records(str(path), [latent_example(frames, recipe, video_id=f"{prefix}{i}")
                              for i, (frames, recipe) in enumerate(videos)])


@pytest.fixture(scope="module")
def grown(tmp_path_factory):
    """A dataset built with --append from 12 videos (two files), then appended to with
    the same input plus a file of 5 new videos; and a full build of all 17 to compare."""
    rng = np.random.default_rng(7)
    root = tmp_path_factory.mktemp("grown")
    _write(root / "in" / "a-0.tfrecord", random_videos(rng, 6), "a")
    _write(root / "in" / "a-1.tfrecord", random_videos(rng, 6), "c")
    run_job(str(root / "in" / "*"), root / "out", *FLAGS, "--append")
    before = dataset_bytes(root / "out")
    _write(root / "in" / "b-0.tfrecord", random_videos(rng, 5), "b")
    run_job(str(root / "in" / "*"), root / "out", *FLAGS, "--append")
    run_job(str(root / "in" / "*"), root / "full", *FLAGS)
    return root, before


def _windows(out) -> dict:
    """(split, video_id, start) -> the window, of every example of the dataset."""
    return {(split, row["video_id"], int(row["start"])): row["window"]
            for split in SPLITS for row in read_examples(str(out), split)}


def test_an_append_adds_a_generation_and_leaves_earlier_shards_as_they_were(grown):
    root, before = grown
    out = root / "out"
    after = dataset_bytes(out)
    old_shards = [name for name in before if ".tfrecord" in name]
    assert old_shards and all(after[name] == before[name] for name in old_shards)
    meta = read_dataset_json(out)
    first, second = meta["generations"]
    assert first["skipped_existing"] == 0 and first["videos"] == 12
    assert second["skipped_existing"] == 12 and second["videos"] == 5
    assert meta["run_id"] == second["run_id"] != first["run_id"]
    for split in SPLITS:   # the old shards, then the new ones
        files = [s["file"] for s in meta["splits"][split]["shards"]]
        assert files[:2] == [s["file"] for s in json.loads(before["dataset.json"])[
            "splits"][split]["shards"]]
        assert all(second["run_id"] in name for name in files[2:])
    assert meta["failures"] == 0 and not after[meta["failures_file"]]
    assert_verified(out)


def test_the_union_holds_what_a_full_build_holds_each_window_once(grown):
    """Each new window is there once, in the split a full build gives its video, with
    its values; videos.jsonl is the full build's, byte for byte."""
    root, _ = grown
    appended, full = _windows(root / "out"), _windows(root / "full")
    assert appended.keys() == full.keys()
    assert sum(len(read_examples(str(root / "out"), s)) for s in SPLITS) == len(full)
    for key, window in full.items():
        np.testing.assert_array_equal(appended[key], window)
    assert (sidecar(root / "out", "videos")).read_bytes() == \
        (sidecar(root / "full", "videos")).read_bytes()
    for split in SPLITS:
        mine = read_dataset_json(root / "out")["splits"][split]
        theirs = read_dataset_json(root / "full")["splits"][split]
        for count in ("videos", "windows", "frames", "skipped_short", "bad_frames"):
            assert mine[count] == theirs[count]


@pytest.mark.slow
def test_every_reader_reads_every_generation(grown):
    root, _ = grown
    out = str(root / "out")
    expected = {(v, s) for split, v, s in _windows(root / "full") if split == "train"}
    source = WindowSource(out, "train")
    assert len(source) == len(expected)
    batch = source.read_batch(range(len(source)))
    assert {(v.decode(), int(s))
            for v, s in zip(batch["video_id"], batch["start"], strict=True)} == expected
    ds = readers.make_dataset(out, "train", batch_size=1, shuffle=False, repeat=False,
                              drop_remainder=False)
    assert {(b["video_id"].numpy()[0].decode(), int(b["start"].numpy()[0]))
            for b in ds} == expected

    torch = pytest.importorskip("torch")
    loader = torch.utils.data.DataLoader(source, batch_size=4, shuffle=True)
    assert {(bytes(v).decode(), int(s)) for b in loader
            for v, s in zip(b["video_id"], b["start"], strict=True)} == expected
    grain = pytest.importorskip("grain.python")
    loader = grain.DataLoader(data_source=source, sampler=grain.IndexSampler(
        len(source), grain.NoSharding(), shuffle=True, seed=0, num_epochs=1), worker_count=0)
    assert {(r["video_id"].decode(), int(r["start"])) for r in loader} == expected


def test_tfds_reads_every_generation_through_its_split_names(grown):
    tfds = pytest.importorskip("tensorflow_datasets")
    root, _ = grown
    out = str(root / "out")
    spec = readers.load_spec(out)
    names = tfds_info.split_names(spec, "train")
    assert names == ["train-g1", "train-g2"]
    builder = tfds.builder_from_directory(out)
    assert "train" not in builder.info.splits          # never a silent part of it
    # the docs' way from the builder alone (docs/readers.md, docs/append.md)
    assert sorted(s for s in builder.info.splits if s.split("-g")[0] == "train") == names
    read = {(r["video_id"].decode(), int(r["start"]))
            for r in tfds.as_numpy(builder.as_dataset(split="+".join(names)))}
    assert read == {(v, s) for split, v, s in _windows(root / "full") if split == "train"}
    single = readers.load_spec(str(root / "full"))
    assert tfds_info.split_names(single, "train") == ["train"]


@pytest.mark.slow
def test_an_append_with_nothing_new_changes_nothing(grown, caplog):
    root, _ = grown
    out = root / "out"
    before = dataset_bytes(out)
    caplog.set_level("INFO")
    make_shards.run(["--input", str(root / "in" / "*"), "--output_dir", str(out), *FLAGS,
                     "--append"])
    assert "nothing new: the 17 input videos are all in" in caplog.text
    assert dataset_bytes(out) == before and sorted(os.listdir(out)) == sorted(before)


@pytest.mark.parametrize("change,named", [
    (["--stride", "2"], "--stride 2 here, 4 in"),
    (["--splits", "train=1.0"], "--splits"),
    (["--seed", "3"], "--seed 3 here, 0 in"),
    (["--tail", "pad"], "--tail"),
    (["--compression", "gzip"], "--compression"),
    (["--metadata_feature", ""], "--metadata_feature"),
    (["--overwrite"], "--append adds to the dataset in --output_dir, --overwrite replaces"),
])
def test_an_append_with_other_window_flags_is_refused_in_one_line(grown, change, named,
                                                                  capsys):
    root, _ = grown
    out = root / "out"
    before = dataset_bytes(out)
    flags = FLAGS + change if change[0] not in FLAGS else \
        [*FLAGS[:FLAGS.index(change[0])], *change, *FLAGS[FLAGS.index(change[0]) + 2:]]
    last = job_line(capsys, "--input", root / "in" / "*", "--output_dir", out, *flags,
                    "--append")
    assert last.startswith("python -m beam_jobs.make_shards: error: ") and named in last
    assert dataset_bytes(out) == before and not os.path.exists(out / "_make_shards")


def test_inputs_of_another_shape_are_refused_naming_the_feature(grown, tmp_path, capsys):
    root, _ = grown
    _write(tmp_path / "wide" / "w.tfrecord",
           random_videos(np.random.default_rng(1), 3, dim=5), "w")
    before = dataset_bytes(root / "out")
    last = job_line(capsys, "--input", tmp_path / "wide" / "*", "--output_dir", root / "out",
                    *FLAGS, "--append")
    assert "--append: the inputs' 'window' is float32 [8, 5]" in last, last
    assert "[8, 3]" in last and dataset_bytes(root / "out") == before


@pytest.mark.slow
def test_known_videos_are_skipped_unread(tmp_path, rng):
    """The known videos' records hold no tensor now (their ids are intact): an append
    never parses their frames, so they are skipped, not failures."""
    _write(tmp_path / "in" / "a.tfrecord", random_videos(rng, 4), "a")
    run_job(str(tmp_path / "in" / "*"), tmp_path / "out", *FLAGS)
    broken = [
        _example_with_id(f"a{i}") for i in range(4)]
    write_records(str(tmp_path / "in" / "a.tfrecord"), broken)
    _write(tmp_path / "in" / "b.tfrecord", random_videos(rng, 2), "b")
    run_job(str(tmp_path / "in" / "*"), tmp_path / "out", *FLAGS, "--append")
    meta = read_dataset_json(tmp_path / "out")
    assert len(broken) == meta["generations"][1]["skipped_existing"] == 4
    assert meta["failures"] == 0 and meta["generations"][1]["videos"] == 2


def _example_with_id(video_id: str) -> bytes:
    import tensorflow as tf

    return tf.train.Example(features=tf.train.Features(feature={
        "vid": tf.train.Feature(bytes_list=tf.train.BytesList(value=[video_id.encode()])),
        "frames": tf.train.Feature(bytes_list=tf.train.BytesList(value=[b"not a tensor"]))})
    ).SerializeToString()


@pytest.mark.slow
def test_known_frame_folders_are_skipped_unread(tmp_path):
    """Pixel input: the known videos' frame folders are gone; an append skips them."""
    for name, start in (("v1", 0), ("v2", 3), ("v3", 6)):
        write_frame_folder(tmp_path / name, solid_frames(10, start=start))
    rows = [{"video_id": v, "frames": v} for v in ("v1", "v2")]
    write_manifest(tmp_path / "m.jsonl", rows)
    flags = ["--window", "4", "--stride", "2", "--frame_encoding", "png"]
    run_job(str(tmp_path / "m.jsonl"), tmp_path / "out", *flags)
    shutil.rmtree(tmp_path / "v1")
    shutil.rmtree(tmp_path / "v2")
    write_manifest(tmp_path / "m.jsonl", rows + [{"video_id": "v3", "frames": "v3"}])
    run_job(str(tmp_path / "m.jsonl"), tmp_path / "out", *flags, "--append")
    meta = read_dataset_json(tmp_path / "out")
    assert [g["videos"] for g in meta["generations"]] == [2, 1]
    assert meta["generations"][1]["skipped_existing"] == 2 and meta["failures"] == 0
    assert {r["video_id"] for r in read_examples(str(tmp_path / "out"))} == {"v1", "v2", "v3"}


@pytest.mark.slow
@pytest.mark.parametrize("stop", ["kill -9", "Ctrl-C"])
def test_a_stopped_append_leaves_the_dataset_as_it_was(tmp_path, rng, stop):
    _write(tmp_path / "in" / "a.tfrecord", random_videos(rng, 6, dim=64), "a")
    out = tmp_path / "out"
    run_job(str(tmp_path / "in" / "*"), out, *FLAGS)
    before = dataset_bytes(out)
    _write(tmp_path / "in" / "b.tfrecord",
           random_videos(rng, 40, lengths=(300, 400), dim=64), "b")
    command = ["--input", str(tmp_path / "in" / "*"), "--output_dir", str(out), *FLAGS,
               "--append", "--spill_buffer_mb", "0.2"]
    process = start_job(command, out)
    os.killpg(process.pid, signal.SIGKILL if stop == "kill -9" else signal.SIGINT)
    process.wait()
    assert dataset_bytes(out) == before
    assert_verified(out)
    run_job(str(tmp_path / "in" / "*"), out, *FLAGS, "--append")   # the rerun commits
    assert read_dataset_json(out)["generations"][1]["videos"] == 40


@pytest.mark.slow
def test_overwrite_rebuilds_one_generation(grown, tmp_path):
    root, _ = grown
    copy = tmp_path / "copy"
    shutil.copytree(root / "out", copy)
    run_job(str(root / "in" / "*"), copy, *FLAGS, "--overwrite")
    meta = read_dataset_json(copy)
    assert len(meta["generations"]) == 1 and meta["generations"][0]["videos"] == 17
    assert sorted(os.listdir(copy)) == sorted(["dataset.json", *meta["files"]])


def _edited(lines: list[bytes]) -> dict[str, list[bytes]]:
    """Ways a videos file can differ from the one its dataset.json was committed with."""
    row = json.loads(lines[3])
    return {"not JSON": lines[:3] + [b"{oops\n"] + lines[4:],
            "no id": lines[:3] + [json.dumps({**row, "video_id": 7}).encode() + b"\n"]
                     + lines[4:],
            "a row twice": lines[:3] + [lines[5]] + lines[4:],
            "a row less": lines[1:],
            "empty": [],
            "a long line": lines[:3] + [b"x" * (2 << 20) + b"\n"] + lines[4:]}


@pytest.mark.slow
def test_an_append_refuses_a_videos_file_that_is_not_the_datasets(grown, tmp_path, capsys):
    """The ids an append skips are its videos file's: one that is not what dataset.json
    was committed with is refused in one line naming the file and the line, before any
    video is read; the dataset stays as it was."""
    root, _ = grown
    copy = tmp_path / "copy"
    shutil.copytree(root / "out", copy)
    path = sidecar(copy, "videos")
    lines = path.read_bytes().splitlines(keepends=True)
    expected = {"not JSON": "line 4 is not a JSON row", "no id": "line 4 has no 'video_id'",
                "a row twice": "lines 4 and 6 both list video",
                "a row less": "split 'train' has",
                "empty": "split 'train' has 0 videos with windows",
                "a long line": "line 4 is longer than 1,048,576 bytes"}
    for case, edited in _edited(lines).items():
        path.write_bytes(b"".join(edited))
        before = dataset_bytes(copy)
        line = job_line(capsys, "--input", root / "in" / "*", "--output_dir", copy, *FLAGS,
                        "--append")
        assert f"{path}: {expected[case]}" in line and "the dataset is damaged" in line, case
        assert dataset_bytes(copy) == before, case


def test_the_append_checks_raise_append_error_a_caller_catches(grown, tmp_path):
    """commit.append.check and commit.videos_file.check raise AppendError (a ValueError,
    which the job tells as Refused); readers.format's check of the videos file raises
    VideosFileError, without the file's name, which the commit's names."""
    root, _ = grown
    copy = tmp_path / "copy"
    shutil.copytree(root / "out", copy)
    spec = load_spec(str(copy))
    committed_videos_file.check(str(copy), spec)     # the file it was committed with
    path = sidecar(copy, "videos")
    path.write_bytes(b"".join(path.read_bytes().splitlines(keepends=True)[1:]))
    with pytest.raises(videos_file.VideosFileError, match="^split 'train' has "):
        videos_file.check(lambda: path.open("rb"), spec)
    with pytest.raises(append.AppendError, match=f"^--append: {path}: split 'train' has .*"
                                                 "the dataset is damaged"):
        committed_videos_file.check(str(copy), spec)
    path.unlink()
    with pytest.raises(append.AppendError, match=f"^--append: {path}: it is missing"):
        committed_videos_file.check(str(copy), spec)
    run = types.SimpleNamespace(flags={}, input_kind=None, encoder=None, labels=None,
                                features=())
    with pytest.raises(append.AppendError, match="has format version 2, written by an older"):
        append.check(dataclasses.replace(spec, format_version=2), str(copy), run, {})


def test_dataset_json_of_generations_is_checked(grown):
    root, _ = grown
    text = (root / "out" / "dataset.json").read_text()
    meta = json.loads(text)
    first, second = (g["run_id"] for g in meta["generations"])
    assert len(readers.load_spec(str(root / "out")).generations) == 2
    cases = {"is a shard of run": lambda m: m["generations"].pop(0),
             "windows, the shards of run": lambda m: m["generations"][0].update(windows=1),
             f"the last is run {first}": lambda m: m["generations"].reverse(),
             "is listed twice": lambda m: m["generations"][0].update(run_id=second)}
    for message, change in cases.items():
        bad = json.loads(text)
        change(bad)
        with pytest.raises(SpecError, match=message):
            readers.format.DatasetSpec.from_json(json.dumps(bad))


@pytest.mark.slow
def test_a_flag_the_datasets_job_did_not_record_counts_as_its_default(grown, tmp_path,
                                                                     caplog, capsys):
    """A dataset written before a flag existed was made with its default: an append at
    the default goes on, one at another value is refused."""
    root, _ = grown
    copy = tmp_path / "copy"
    shutil.copytree(root / "out", copy)
    meta = read_dataset_json(copy)
    del meta["flags"]["allow_nonfinite"]
    (copy / "dataset.json").write_text(json.dumps(meta, indent=2) + "\n")
    argv = ["--input", str(root / "in" / "*"), "--output_dir", str(copy), *FLAGS, "--append"]
    caplog.set_level("INFO")
    make_shards.run(argv)
    assert "nothing new" in caplog.text
    with pytest.raises(Refused, match="--allow_nonfinite true here, false in"):
        make_shards.run([*argv, "--allow_nonfinite"])


@pytest.mark.slow
def test_an_append_over_the_failure_threshold_leaves_the_dataset_as_it_was(grown, tmp_path):
    """The threshold is over the videos the append tried: one good new video and one
    that cannot be read are 50% failed; nothing is committed."""
    root, _ = grown
    copy = tmp_path / "copy"
    shutil.copytree(root / "out", copy)
    inputs = tmp_path / "in"
    shutil.copytree(root / "in", inputs)
    _write(inputs / "d-0.tfrecord", random_videos(np.random.default_rng(2), 1), "d")
    write_records(str(inputs / "d-1.tfrecord"), [_example_with_id("d-bad")])
    before = dataset_bytes(copy)
    with pytest.raises(Failed, match="1 of 2 videos failed"):
        make_shards.run(["--input", str(inputs / "*"), "--output_dir", str(copy), *FLAGS,
                         "--append"])
    assert dataset_bytes(copy) == before
def test_a_paged_record_reads_as_its_bytes(tmp_path, rng):
    data = rng.integers(0, 256, 3 * PagedRecord.PAGE + 17, dtype=np.uint8).tobytes()
    (tmp_path / "f").write_bytes(b"head" + data + b"tail")
    with open(tmp_path / "f", "rb") as f:
        paged = PagedRecord(f, 4, len(data))
        assert len(paged) == len(data)
        for first, last in [(0, 1), (5, 4100), (4095, 4097), (0, len(data)), (9000, 99999)]:
            assert paged[first:last] == data[first:last]
        for at in (0, 4095, 4096, len(data) - 1):
            assert paged[at] == data[at]
        with pytest.raises(IndexError):
            paged[len(data)]


def test_a_known_record_is_skipped_unread_its_data_not_checked(tmp_path, rng):
    """The records of known ids are sought past: a flipped byte in one's tensor (its CRC
    now fails) does not make it a failure, where a full read would."""
    from beam_jobs.sources.latents import LatentParser
    from beam_jobs.sources.tfrecords import Skipped, read_records

    videos = random_videos(rng, 3, lengths=(2000, 2001), dim=8)
    path = tmp_path / "a.tfrecord"
    _write(path, videos, "a")
    data = bytearray(path.read_bytes())
    data[len(data) // 6] ^= 0xFF            # inside the first record's frames
    path.write_bytes(bytes(data))
    fmt = LatentParser(id_feature="vid")

    def skip(index, record):
        video_id = fmt.video_id_of(record, str(path), index)
        return video_id if video_id in {"a0", "a2"} else None

    read = list(read_records(str(path), len(data), 0, skip))
    assert read[0] == (0, Skipped("a0")) and read[2] == (2, Skipped("a2"))
    assert fmt.parse(read[1][1], str(path), 1).video_id == "a1"
    assert "fails its CRC" in next(read_records(str(path), len(data)))[1].reason


@pytest.mark.slow
def test_new_videos_too_short_for_a_window_are_committed_and_known(tmp_path, rng):
    _write(tmp_path / "in" / "a.tfrecord", random_videos(rng, 4), "a")
    run_job(str(tmp_path / "in" / "*"), tmp_path / "out", *FLAGS)
    _write(tmp_path / "in" / "b.tfrecord", random_videos(rng, 2, lengths=(3, 5)), "b")
    run_job(str(tmp_path / "in" / "*"), tmp_path / "out", *FLAGS, "--append")
    meta = read_dataset_json(tmp_path / "out")
    assert meta["generations"][1]["skipped_short"] == 2
    assert meta["generations"][1]["windows"] == 0 and meta["generations"][1]["videos"] == 0
    before = dataset_bytes(tmp_path / "out")
    run_job(str(tmp_path / "in" / "*"), tmp_path / "out", *FLAGS, "--append")  # nothing new
    assert dataset_bytes(tmp_path / "out") == before
