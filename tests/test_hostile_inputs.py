"""Bad input is a failure row (or a masked frame) with its reason, or a one-line error
before any work; never a crashed job, never a quietly changed dataset."""
import fractions
import json
import os

import numpy as np
import pytest
from helpers import (
    failures_by_video,
    inspect_run,
    job_line,
    read_dataset_json,
    read_examples,
    run_job,
    sidecar,
)
from input_files import (
    latent_example,
    solid_frames,
    write_frame_folder,
    write_manifest,
    write_records,
    write_video,
)
from PIL import Image

import readers
from beam_jobs.job.errors import Failed

# --- TFRecord files that break -------------------------------------------------------

def _frames(i: int) -> np.ndarray:
    return np.full((12, 2), i, np.float32)


def _record_offsets(path) -> list[int]:
    data, offsets, at = open(path, "rb").read(), [], 0
    while at < len(data):
        offsets.append(at)
        at += 16 + int.from_bytes(data[at:at + 8], "little")
    return offsets


@pytest.mark.slow
def test_a_bad_record_is_skipped_alone_and_the_rest_is_read(tmp_path):
    path = write_records(str(tmp_path / "in" / "a.tfrecord"),
                         [latent_example(_frames(i), [i, 0]) for i in range(8)])
    data = bytearray(open(path, "rb").read())
    data[_record_offsets(path)[3] + 12 + 5] ^= 0xFF   # inside record 3's data
    open(path, "wb").write(bytes(data))
    run_job(str(tmp_path / "in" / "*"), tmp_path / "out", "--window", "4", "--stride", "4",
            "--max_failure_fraction", "0.2")
    (row,) = failures_by_video(tmp_path / "out").values()
    assert row["record_index"] == 3 and row["records"] == 1 and "CRC" in row["reason"]
    ids = {e["video_id"] for e in read_examples(tmp_path / "out")}
    assert ids == {f"a.tfrecord:{i}" for i in range(8) if i != 3}


@pytest.mark.slow
def test_lost_framing_counts_the_rest_of_the_file_against_the_threshold(tmp_path):
    path = write_records(str(tmp_path / "in" / "a.tfrecord"),
                         [latent_example(_frames(i), [i, 0]) for i in range(20)])
    data = bytearray(open(path, "rb").read())
    data[_record_offsets(path)[5] + 2] ^= 0xFF        # record 5's length frame
    open(path, "wb").write(bytes(data))
    with pytest.raises(Failed, match="15 of 20 videos failed"):  # 15 of 20 lost: far over 5%
        run_job(str(tmp_path / "in" / "*"), tmp_path / "out", "--window", "4")
    (row,) = failures_by_video(tmp_path / "out").values()
    assert row["record_index"] == 5 and row["records"] == 15
    assert "length frame is corrupt" in row["reason"] and "about 15 records" in row["reason"]


def test_a_media_file_under_a_latent_name_is_told_by_its_first_bytes(tmp_path):
    """A GIF or an MP4 that a glob of latents catches (`part-0001`, `x.dat`) is a row
    saying what it is, not a corrupt length frame."""
    write_records(str(tmp_path / "in" / "a.tfrecord"),
                  [latent_example(_frames(i), [i, 0]) for i in range(20)])
    Image.new("RGB", (8, 8)).save(tmp_path / "in" / "part-0001", "GIF")
    write_video(tmp_path / "clip.mp4", [np.zeros((16, 16, 3), np.uint8)] * 2)
    os.replace(tmp_path / "clip.mp4", tmp_path / "in" / "x.dat")
    run_job(str(tmp_path / "in" / "*"), tmp_path / "out", "--window", "4",
            "--max_failure_fraction", "0.2")
    rows = {os.path.basename(r["source"]): r["reason"]
            for r in map(json.loads, open(sidecar(tmp_path / "out", "failures")))}
    assert rows == {"part-0001": "by its first bytes, a GIF file, not a TFRecord file: not read",
                    "x.dat": "by its first bytes, a MP4/QuickTime file, not a TFRecord "
                             "file: not read"}


@pytest.mark.slow
def test_a_plain_file_named_gz_is_a_failure_not_a_crash(tmp_path):
    write_records(str(tmp_path / "in" / "a.tfrecord"),
                  [latent_example(_frames(i), [i, 0]) for i in range(20)])
    write_records(str(tmp_path / "in" / "b.tfrecord.gz"), [latent_example(_frames(0), [0, 0])])
    run_job(str(tmp_path / "in" / "*"), tmp_path / "out", "--window", "4")
    (row,) = failures_by_video(tmp_path / "out").values()
    assert row["source"].endswith("b.tfrecord.gz") and "not a gzip file" in row["reason"]
    assert row["records"] == 1


# --- manifests and their files -------------------------------------------------------

@pytest.fixture
def frames_dir(tmp_path):
    write_frame_folder(tmp_path / "v", solid_frames(6))
    return "v"


@pytest.mark.slow
def test_bad_labels_are_failure_rows(tmp_path, frames_dir):
    (tmp_path / "two_headers.csv").write_text("hrr\nunits\n" + "\n".join("1" * 6))
    (tmp_path / "bom.csv").write_bytes("\ufeffhrr\n".encode("utf-8") + b"1\n2\n3\n4\n5\n6\n")
    rows = [{"video_id": "ok", "frames": frames_dir, "labels": [0, 1, 2, 3, 4, 5]},
            {"video_id": "bom", "frames": frames_dir, "labels": "bom.csv"},
            {"video_id": "strings", "frames": frames_dir, "labels": ["a", "b", "c", "d", "e", "f"]},
            {"video_id": "missing", "frames": frames_dir, "labels": "nowhere.csv"},
            {"video_id": "ragged", "frames": frames_dir,
             "labels": [[1, 2], [3], [4], [5], [6], [7]]},
            {"video_id": "headers", "frames": frames_dir, "labels": "two_headers.csv"},
            {"video_id": "nan", "frames": frames_dir, "labels": [0, 1, 2, None, 4, 5]}]
    write_manifest(tmp_path / "m.jsonl", rows)
    run_job(str(tmp_path / "m.jsonl"), tmp_path / "out", "--window", "3",
            "--max_failure_fraction", "1")
    failures = failures_by_video(tmp_path / "out")
    assert set(failures) == {"strings", "missing", "ragged", "headers", "nan"}
    assert "not numbers" in failures["strings"]["reason"]
    assert "does not exist" in failures["missing"]["reason"]
    assert "not numbers" in failures["ragged"]["reason"]
    assert "row 2 is not numbers: 'units'" in failures["headers"]["reason"]
    assert "NaN or Inf" in failures["nan"]["reason"]
    by_id = {e["video_id"]: e for e in read_examples(tmp_path / "out")}
    assert by_id["bom"]["labels"].tolist() == [1, 2, 3] or sorted(
        e["labels"].tolist() for e in read_examples(tmp_path / "out")
        if e["video_id"] == "bom")[0] == [1, 2, 3]


@pytest.mark.slow
def test_manifest_rows_that_are_not_text_or_json_are_failure_rows(tmp_path, frames_dir):
    good = json.dumps({"video_id": "ok", "frames": frames_dir}).encode()
    bad_bytes = json.dumps({"video_id": "caf\u00e9", "frames": frames_dir},
                           ensure_ascii=False).encode("utf-8").replace(b"\xc3\xa9", b"\xe9")
    (tmp_path / "m.jsonl").write_bytes(b"\n".join([good, bad_bytes, b"{not json", b"[1, 2]"]))
    run_job(str(tmp_path / "m.jsonl"), tmp_path / "out", "--window", "3",
            "--max_failure_fraction", "1")
    failures = failures_by_video(tmp_path / "out")
    assert "not UTF-8" in failures["row 1"]["reason"]
    assert "not a JSON object" in failures["row 2"]["reason"]
    assert "JSON list, not an object" in failures["row 3"]["reason"]
    assert {e["video_id"] for e in read_examples(tmp_path / "out")} == {"ok"}


def test_files_that_are_not_manifests_are_refused_in_one_line(tmp_path, capsys):
    (tmp_path / "binary.jsonl").write_bytes(b"\x00\x01\x02 not text")
    assert "binary file, not a manifest" in job_line(capsys,
        "--input", str(tmp_path / "binary.jsonl"), "--output_dir", str(tmp_path / "o1"),
        "--window", "3")
    (tmp_path / "prose.jsonl").write_text("these are\nnot json lines\n")
    assert "is not a JSON-lines manifest" in job_line(capsys,
        "--input", str(tmp_path / "prose.jsonl"), "--output_dir", str(tmp_path / "o2"),
        "--window", "3")
    (tmp_path / "cols.csv").write_text("id,path\na,b\n")
    line = job_line(capsys, "--input", str(tmp_path / "cols.csv"), "--output_dir",
                    str(tmp_path / "o3"), "--window", "3")
    assert "needs the columns video_id, and frames or video" in line and "['id', 'path']" in line
    assert not any((tmp_path / o).exists() for o in ("o1", "o2", "o3"))


@pytest.mark.slow
def test_frame_paths_that_are_not_frames_are_masked_with_a_reason(tmp_path):
    """In a CSV manifest with a byte-order mark, which reads like one without."""
    paths = write_frame_folder(tmp_path / "v", solid_frames(5))
    os.mkfifo(tmp_path / "fifo.png")
    big = tmp_path / "big.png"
    Image.fromarray(np.random.default_rng(0).integers(0, 255, (24, 32, 3), np.uint8)).save(big)
    frames = [paths[0], str(tmp_path / "fifo.png"), "/dev/zero", str(big), paths[1]]
    os.mkfifo(tmp_path / "fifo.mp4")
    (tmp_path / "m.csv").write_bytes("\ufeffvideo_id,frames,video\n".encode("utf-8") + (
        f'v,"{json.dumps(frames).replace(chr(34), chr(34) * 2)}",\nclip,,fifo.mp4\n').encode())
    run_job(str(tmp_path / "m.csv"), tmp_path / "out", "--window", "5",
            "--max_frame_bytes", str(max(map(os.path.getsize, paths)) + 100),
            "--max_failure_fraction", "0.5")
    assert "not a regular file" in failures_by_video(tmp_path / "out")["clip"]["reason"]
    (e,) = read_examples(tmp_path / "out")
    assert e["mask"].tolist() == [1, 0, 0, 0, 1]
    rows = [json.loads(line) for line in open(sidecar(tmp_path / "out", "bad_frames"))]
    reasons = {r["frame"]: r["reason"] for r in rows}
    assert "not a regular file" in reasons[1] and "not a regular file" in reasons[2]
    assert "over --max_frame_bytes" in reasons[3]


@pytest.mark.slow
def test_deep_alpha_and_palette_images_keep_their_values(tmp_path):
    """16-bit frames are scaled to 8 bits, not clipped to white; alpha is dropped."""
    os.makedirs(tmp_path / "v")
    ramp = (np.arange(24 * 32).reshape(24, 32) * 85).astype(np.uint16)    # up to 65195
    Image.fromarray(ramp).save(tmp_path / "v" / "f0.png")
    rgba = np.zeros((24, 32, 4), np.uint8)
    rgba[..., 0], rgba[..., 3] = 200, 0                                   # fully transparent
    Image.fromarray(rgba, "RGBA").save(tmp_path / "v" / "f1.png")
    Image.fromarray(np.full((24, 32, 3), 90, np.uint8)).convert("P").save(tmp_path / "v" / "f2.png")
    write_manifest(tmp_path / "m.jsonl", [{"video_id": "v", "frames": "v"}])
    run_job(str(tmp_path / "m.jsonl"), tmp_path / "out", "--window", "3",
            "--frame_encoding", "png", "--channels", "1")
    (e,) = read_examples(tmp_path / "out")
    deep = e["window"][0][..., 0].astype(int)
    np.testing.assert_allclose(deep, np.round(ramp / 257.0), atol=1)
    assert deep.max() < 255 and deep.min() == 0
    assert e["window"][1].mean() == pytest.approx(0.299 * 200, abs=1)   # RGB kept, alpha dropped
    assert e["window"][2].mean() == pytest.approx(90, abs=1)


# --- video files ---------------------------------------------------------------------

@pytest.mark.slow
def test_a_video_cut_short_fails_instead_of_losing_frames(tmp_path):
    os.makedirs(tmp_path / "clips")
    rng = np.random.default_rng(0)
    noisy = [rng.integers(0, 255, (32, 48, 3), np.uint8) for _ in range(40)]
    whole = write_video(tmp_path / "clips" / "whole.mp4", noisy,
                        options={"movflags": "faststart"})   # the frame count up front
    cut = tmp_path / "clips" / "cut.mp4"
    data = open(whole, "rb").read()
    cut.write_bytes(data[:int(len(data) * 0.8)])
    run_job(str(tmp_path / "clips" / "*.mp4"), tmp_path / "out", "--window", "10",
            "--frame_encoding", "raw", "--max_failure_fraction", "0.5")
    failures = failures_by_video(tmp_path / "out")
    assert list(failures) == ["cut"] and "of the 40 frames" in failures["cut"]["reason"]
    assert "cut short" in failures["cut"]["reason"]
    assert {e["video_id"] for e in read_examples(tmp_path / "out")} == {"whole"}


@pytest.mark.slow
def test_fps_counts_time_from_the_first_frame(tmp_path):
    """A stream whose timestamps start at 2 s must not repeat its first frame."""
    import av

    os.makedirs(tmp_path / "clips")
    path = str(tmp_path / "clips" / "late.mp4")
    with av.open(path, "w") as container:
        stream = container.add_stream("libx264", rate=10)
        stream.width, stream.height, stream.pix_fmt = 48, 32, "yuv420p"
        for i, frame in enumerate(solid_frames(20, size=(32, 48))):
            video_frame = av.VideoFrame.from_ndarray(frame, format="rgb24")
            video_frame.pts = 20 + i                   # 2 s in, at a 1/10 s time base
            video_frame.time_base = fractions.Fraction(1, 10)
            for packet in stream.encode(video_frame):
                container.mux(packet)
        for packet in stream.encode():
            container.mux(packet)
    run_job(str(tmp_path / "clips" / "*"), tmp_path / "out", "--window", "5", "--stride",
            "5", "--tail", "drop", "--fps", "5", "--frame_encoding", "raw")
    examples = sorted(read_examples(tmp_path / "out"), key=lambda e: e["start"])
    levels = [int(round(f.mean() / 8)) for e in examples for f in e["window"]]
    assert levels == list(range(0, 20, 2))   # every other frame, none repeated


# --- the schema comes from all rows ----------------------------------------------------

@pytest.mark.slow
def test_the_schema_comes_from_every_row_not_the_first(tmp_path, frames_dir):
    write_manifest(tmp_path / "m.jsonl", [
        {"video_id": "first", "frames": frames_dir},
        *({"video_id": f"v{i}", "frames": frames_dir, "labels": list(range(6)),
           "metadata": [i, 1]} for i in range(3))])
    run_job(str(tmp_path / "m.jsonl"), tmp_path / "out", "--window", "3",
            "--max_failure_fraction", "0.5")
    assert "no labels (other rows" in failures_by_video(tmp_path / "out")["first"]["reason"]
    names = [f["name"] for f in read_dataset_json(tmp_path / "out")["features"]]
    assert "labels" in names and "metadata" in names

    write_records(str(tmp_path / "lat" / "a.tfrecord"),
                  [latent_example(_frames(0))] + [latent_example(_frames(i), [i, 1, 2, 3])
                                                   for i in range(1, 8)])
    run_job(str(tmp_path / "lat" / "*"), tmp_path / "lat_out", "--window", "4",
            "--max_failure_fraction", "0.2")
    (row,) = failures_by_video(tmp_path / "lat_out").values()
    assert row["record_index"] == 0 and "no metadata feature 'recipe'" in row["reason"]
    assert all(e["metadata"].shape == (4,) for e in read_examples(tmp_path / "lat_out"))


@pytest.mark.slow
def test_nonfinite_values_fail_unless_allowed_and_stats_count_them(tmp_path, capsys):
    bad = _frames(1)
    bad[3, 1] = np.nan
    bad[4, 0] = np.inf
    write_records(str(tmp_path / "in" / "a.tfrecord"),
                  [latent_example(_frames(0), [0, 0]), latent_example(bad, [1, 0]),
                   latent_example(_frames(2), [2, np.nan])])
    run_job(str(tmp_path / "in" / "*"), tmp_path / "out", "--window", "4",
            "--max_failure_fraction", "1")
    failures = failures_by_video(tmp_path / "out")
    assert "latents hold 2 NaN or Inf" in failures["a.tfrecord:1"]["reason"]
    assert "metadata hold 1 NaN or Inf" in failures["a.tfrecord:2"]["reason"]
    run_job(str(tmp_path / "in" / "*"), tmp_path / "kept", "--window", "4",
            "--allow_nonfinite")
    code, out, err = inspect_run(capsys, tmp_path / "kept", "--stats", "--all")
    window_row = [line for line in out.splitlines() if line.split()[:1] == ["window"]][-1]
    # two windows of 4 frames cover the bad frames (starts 0, 4, 8): one NaN, one Inf
    assert code == 0 and window_row.split()[-2:] == ["1", "1"], out + err


@pytest.mark.slow
def test_bfloat16_latents_are_kept(tmp_path):
    import tensorflow as tf

    frames = np.arange(40, dtype=np.float32).reshape(20, 2) / 4
    example = tf.train.Example(features=tf.train.Features(feature={"frames": tf.train.Feature(
        bytes_list=tf.train.BytesList(value=[tf.io.serialize_tensor(
            tf.constant(frames, tf.bfloat16)).numpy()]))}))
    write_records(str(tmp_path / "in" / "a.tfrecord"), [example.SerializeToString()])
    run_job(str(tmp_path / "in" / "*"), tmp_path / "out", "--window", "5", "--stride", "5")
    window = read_dataset_json(tmp_path / "out")["features"][0]
    assert window["dtype"] == "bfloat16" and window["encoding"] == "raw"
    batch = next(iter(readers.make_dataset(str(tmp_path / "out"), batch_size=4)))
    assert batch["window"].dtype == tf.float32
    order = np.argsort(batch["start"].numpy())
    np.testing.assert_array_equal(batch["window"].numpy()[order].reshape(-1, 2), frames)

    from readers.numpy import WindowSource
    for keep in (False, True):
        ours = WindowSource(str(tmp_path / "out"), keep_float16=keep).read_batch(range(4))
        assert ours["window"].dtype == (tf.bfloat16.as_numpy_dtype if keep else np.float32)
        np.testing.assert_array_equal(
            ours["window"][np.argsort(ours["start"])].astype(np.float32).reshape(-1, 2), frames)


# --- ids -------------------------------------------------------------------------------

@pytest.mark.slow
def test_files_with_the_same_name_in_different_folders_stay_apart(tmp_path):
    for k, day in enumerate(("day1", "day2")):   # other content: another video
        write_records(str(tmp_path / "lat" / day / "part-0.tfrecord"),
                      [latent_example(_frames(i + 2 * k), [i, 0]) for i in range(2)])
        os.makedirs(tmp_path / "clips" / day.replace("day", "cam"))
        write_video(tmp_path / "clips" / day.replace("day", "cam") / "0001.mp4",
                    solid_frames(8, size=(32, 48), start=100 * k))
    run_job(str(tmp_path / "lat" / "*" / "*.tfrecord"), tmp_path / "lat_out", "--window", "4")
    assert {e["video_id"] for e in read_examples(tmp_path / "lat_out")} == {
        "day1/part-0.tfrecord:0", "day1/part-0.tfrecord:1",
        "day2/part-0.tfrecord:0", "day2/part-0.tfrecord:1"}
    run_job(str(tmp_path / "clips" / "*" / "*.mp4"), tmp_path / "clip_out", "--window", "4")
    assert {e["video_id"] for e in read_examples(tmp_path / "clip_out")} == {
        "cam1/0001", "cam2/0001"}


@pytest.mark.slow
def test_duplicate_ids_fail_every_copy_and_merge_nothing(tmp_path, frames_dir):
    write_manifest(tmp_path / "m.jsonl", [
        {"video_id": "a", "frames": frames_dir},
        {"video_id": "twice", "frames": frames_dir, "split": "train"},
        {"video_id": "twice", "frames": [os.path.join(frames_dir, "frame_0.png")] * 4,
         "split": "test"},
        # a's frames in another order: another video
        {"video_id": "b", "frames": [os.path.join(frames_dir, f"frame_{i}.png")
                                     for i in reversed(range(6))]}])
    run_job(str(tmp_path / "m.jsonl"), tmp_path / "out", "--window", "3",
            "--splits", "train=0.5,test=0.5", "--max_failure_fraction", "0.5")
    rows = [json.loads(line) for line in open(sidecar(tmp_path / "out", "failures"))]
    assert [(r["video_id"], r["record_index"]) for r in rows] == [("twice", 1), ("twice", 2)]
    assert all("appears 2 times" in r["reason"] for r in rows)
    meta = read_dataset_json(tmp_path / "out")
    assert meta["failures"] == 2
    assert sum(s["videos"] for s in meta["splits"].values()) == 2
    seen = {e["video_id"] for split in ("train", "test")
            for e in read_examples(tmp_path / "out", split)}
    assert seen == {"a", "b"}

    write_records(str(tmp_path / "lat" / "a.tfrecord"),
                  [latent_example(_frames(i), [i, 0], video_id=v)
                   for i, v in enumerate(["x", "y", "x", "z", "w"])])
    run_job(str(tmp_path / "lat" / "*"), tmp_path / "lat_out", "--window", "4", "--stride", "2",
            "--id_feature", "vid", "--max_failure_fraction", "0.5", "--num_shards", "2")
    assert {e["video_id"] for e in read_examples(tmp_path / "lat_out")} == {"y", "z", "w"}
    failures = map(json.loads, open(sidecar(tmp_path / "lat_out", "failures")))
    assert [r["record_index"] for r in failures] == [0, 2]
