"""Frame folders and video files through the job, and pixel windows through the reader."""
import dataclasses
import json
import os
import shutil

import fsspec
import numpy as np
import pytest
import tensorflow as tf
from helpers import (
    assert_verified,
    command,
    failed_run_file,
    job_line,
    read_dataset_json,
    read_examples,
    run_job,
    sidecar,
)
from input_files import (
    marked_frame,
    solid_frames,
    write_frame_folder,
    write_manifest,
    write_oriented_images,
    write_rotated_video,
    write_video,
)

import readers
from beam_jobs.job.errors import Failed


def _by_video(examples):
    out = {}
    for e in examples:
        out.setdefault(e["video_id"], {})[int(e["start"])] = e
    return out


def _level(frame: np.ndarray) -> int:
    """The index a solid frame was made with (its value / 8)."""
    return int(round(frame.mean() / 8))


@pytest.mark.slow
@pytest.mark.parametrize("encoding", ["png", "raw"])
def test_frame_folders_window_in_natural_order_with_labels(tmp_path, encoding):
    write_frame_folder(tmp_path / "v1", solid_frames(12))          # frame_0 ... frame_11
    write_frame_folder(tmp_path / "v2", solid_frames(7, start=3))
    # what macOS leaves beside copied files: hidden, never frames, listed or globbed
    apple_double = b"\x00\x05\x16\x07\x00\x02\x00\x00Mac OS X        " + bytes(60)
    (tmp_path / "v1" / "._frame_3.png").write_bytes(apple_double)
    (tmp_path / "v1" / ".DS_Store").write_bytes(bytes(16))
    (tmp_path / "v2" / "._frame_0.png").write_bytes(apple_double)
    np.save(tmp_path / "v2.npy", np.repeat(np.arange(7, dtype=np.float32)[:, None], 2, 1))
    (tmp_path / "v1.csv").write_text("a,b\n" + "\n".join(f"{i},{i}" for i in range(12)))
    write_manifest(tmp_path / "m.jsonl", [
        {"video_id": "v1", "frames": "v1", "labels": "v1.csv", "metadata": [1, 2]},
        {"video_id": "v2", "frames": "v2/*.png", "labels": "v2.npy", "metadata": [3, 4]}])
    run_job(str(tmp_path / "m.jsonl"), tmp_path / "out", "--window", "5", "--stride", "3",
            "--tail", "pad", "--frame_encoding", encoding)
    meta = read_dataset_json(tmp_path / "out")
    window = meta["features"][0]
    assert window == {"name": "window", "shape": [5, 24, 32, 3], "dtype": "uint8",
                      "encoding": encoding, "stored_as": meta["features"][0]["stored_as"]}
    assert window["stored_as"]["values"] == (5 if encoding == "png" else 1)
    videos = _by_video(read_examples(tmp_path / "out"))
    assert sorted(videos["v1"]) == [0, 3, 6, 9] and sorted(videos["v2"]) == [0, 3]
    for video, offset in (("v1", 0), ("v2", 3)):
        n = 12 if video == "v1" else 7
        for start, e in videos[video].items():
            real = min(5, n - start)
            assert [_level(f) for f in e["window"][:real]] == list(range(start + offset,
                                                                        start + offset + real))
            assert not e["window"][real:].any()
            assert e["mask"].tolist() == [1] * real + [0] * (5 - real)
    assert videos["v1"][9]["labels"].tolist() == [[9, 9], [10, 10], [11, 11], [0, 0], [0, 0]]
    assert videos["v2"][3]["labels"].tolist() == [[3, 3], [4, 4], [5, 5], [6, 6], [0, 0]]
    np.testing.assert_array_equal(videos["v2"][0]["metadata"], [3, 4])
    # png and raw are lossless: every pixel is exactly the source's
    frame = videos["v1"][3]["window"][1]
    np.testing.assert_array_equal(frame, solid_frames(5)[4])


@pytest.mark.slow
def test_resize_grayscale_and_jpeg_within_tolerance(tmp_path, rng):
    from PIL import Image

    smooth = [Image.fromarray(rng.integers(0, 255, (6, 8, 3), dtype=np.uint8)).resize(
        (64, 48), Image.Resampling.BICUBIC) for _ in range(6)]
    frames = [np.asarray(image) for image in smooth]
    write_frame_folder(tmp_path / "v", frames)
    write_manifest(tmp_path / "m.jsonl", [{"video_id": "v", "frames": "v"}])
    run_job(str(tmp_path / "m.jsonl"), tmp_path / "gray", "--window", "3",
            "--frame_size", "24x32", "--channels", "1", "--frame_encoding", "png")
    examples = read_examples(tmp_path / "gray")
    assert examples[0]["window"].shape == (3, 24, 32, 1)

    run_job(str(tmp_path / "m.jsonl"), tmp_path / "jpeg", "--window", "3",
            "--frame_encoding", "jpeg", "--jpeg_quality", "95")
    batch = next(iter(readers.make_dataset(str(tmp_path / "jpeg"), batch_size=2,
                                           shuffle=False)))
    assert batch["window"].shape == (2, 3, 48, 64, 3) and batch["window"].dtype == tf.uint8
    for window, start in zip(batch["window"].numpy(), batch["start"].numpy(), strict=True):
        for i in range(3):
            diff = np.abs(window[i].astype(int) - frames[start + i].astype(int))
            assert diff.mean() < 4, diff.mean()  # JPEG at quality 95: stated tolerance


@pytest.mark.slow
def test_source_jpegs_of_the_right_size_pass_through(tmp_path):
    paths = write_frame_folder(tmp_path / "v", solid_frames(4), fmt="jpg")
    write_manifest(tmp_path / "m.jsonl", [{"video_id": "v", "frames": "v"}])
    run_job(str(tmp_path / "m.jsonl"), tmp_path / "out", "--window", "4")
    (example,) = read_examples(tmp_path / "out")
    assert example["window.bytes"] == [open(p, "rb").read() for p in paths]


@pytest.mark.slow
def test_missing_and_corrupt_frames_are_masked_or_fail_the_video(tmp_path):
    paths = write_frame_folder(tmp_path / "v", solid_frames(6))
    with open(paths[2], "wb") as f:
        f.write(b"not an image")
    frames = paths[:4] + [str(tmp_path / "v" / "gone.png")] + paths[4:]
    write_manifest(tmp_path / "m.jsonl", [
        {"video_id": "v", "frames": frames, "labels": [1, 2, 3, 4, 5, 6, 7]}])
    run_job(str(tmp_path / "m.jsonl"), tmp_path / "out", "--window", "7", "--frame_encoding",
            "raw")
    (e,) = read_examples(tmp_path / "out")
    assert e["mask"].tolist() == [1, 1, 0, 1, 0, 1, 1]
    assert e["labels"].tolist() == [1, 2, 0, 4, 0, 6, 7]
    assert not e["window"][2].any() and not e["window"][4].any()
    assert _level(e["window"][5]) == 4
    meta = read_dataset_json(tmp_path / "out")
    assert meta["splits"]["train"]["bad_frames"] == 2
    rows = [json.loads(line) for line in open(sidecar(tmp_path / "out", "bad_frames"))]
    assert [(r["video_id"], r["frame"], os.path.basename(r["where"])) for r in rows] == [
        ("v", 2, "frame_2.png"), ("v", 4, "gone.png")]
    assert rows[0]["reason"] == "not an image file Pillow can decode"
    assert "No such file" in rows[1]["reason"]
    assert all(r["source"] == str(tmp_path / "m.jsonl") for r in rows)

    with pytest.raises(Failed):
        run_job(str(tmp_path / "m.jsonl"), tmp_path / "fail", "--window", "7",
                "--on_bad_frame", "fail")
    (row,) = [json.loads(line) for line in open(failed_run_file(tmp_path / "fail"))]
    assert row["video_id"] == "v" and "frame" in row["reason"] and "frame_2.png" in row["reason"]


@pytest.mark.slow
def test_video_files_by_glob_with_fps_and_max_frames(tmp_path):
    write_video(tmp_path / "clips" / "a.mp4" if os.makedirs(tmp_path / "clips") is None else "",
                solid_frames(30, size=(32, 48)), rate=10)
    write_video(tmp_path / "clips" / "b.webm", solid_frames(20, size=(32, 48)),
                codec="libvpx-vp9", rate=10)
    run_job(str(tmp_path / "clips" / "*"), tmp_path / "out", "--window", "4", "--stride", "4",
            "--tail", "drop", "--frame_encoding", "raw")
    videos = _by_video(read_examples(tmp_path / "out"))
    assert sorted(videos) == ["a", "b"]
    assert sorted(videos["a"]) == list(range(0, 28, 4)) and sorted(videos["b"]) == [0, 4, 8, 12, 16]
    for start, e in videos["a"].items():   # lossy codecs: levels survive
        assert [_level(f) for f in e["window"]] == list(range(start, start + 4))

    run_job(str(tmp_path / "clips" / "a.mp4"), tmp_path / "fps", "--window", "3", "--stride",
            "3", "--tail", "drop", "--fps", "5", "--frame_encoding", "raw")
    videos = _by_video(read_examples(tmp_path / "fps"))
    assert sorted(videos["a"]) == [0, 3, 6, 9, 12]            # 30 frames at 10 fps -> 15
    assert [_level(f) for f in videos["a"][3]["window"]] == [6, 8, 10]

    run_job(str(tmp_path / "clips" / "b.webm"), tmp_path / "cap", "--window", "4",
            "--max_frames", "9", "--frame_encoding", "raw")
    assert sorted(_by_video(read_examples(tmp_path / "cap"))["b"]) == [0, 4, 5]


@pytest.mark.slow
def test_two_identical_video_files_are_one_video_and_the_summary_counts_the_copy(tmp_path):
    """The same mp4 under two names is one video (the smaller id); the job's summary
    counts the other as skipped as a duplicate and says where the line naming it is,
    and that line is in the command's output (it once said only INFO, and the table's
    `skipped` column, videos too short, read 0)."""
    clips = tmp_path / "clips"
    os.makedirs(clips)
    write_video(clips / "a.mp4", solid_frames(12, size=(24, 32)))
    shutil.copyfile(clips / "a.mp4", clips / "b.mp4")
    done = command("beam_jobs.make_shards", "--input", clips / "*.mp4", "--output_dir",
                   tmp_path / "out", "--window", "4", "--frame_encoding", "raw")
    assert done.returncode == 0, done.stderr[-3000:]
    assert_verified(tmp_path / "out")
    (row,) = map(json.loads, open(sidecar(tmp_path / "out", "videos")))
    assert row["video_id"] == "a"
    assert read_dataset_json(tmp_path / "out")["generations"][0]["skipped_existing"] == 1
    lines = done.stderr.splitlines()
    assert "INFO beam_jobs.cut: skipped 'b': its frames are those of 'a'" in lines
    (summary,) = [line for line in lines if line.startswith("skipped as duplicates:")]
    assert summary.startswith("skipped as duplicates: 1 input video(s) whose frames, labels "
                              "and metadata another video has, stored once under one id")
    assert ("each is named with the video it repeats in a line \"skipped 'ID': its frames "
            "are those of 'ID'\" of this run's log") in summary
    assert lines.index(summary) > lines.index(
        "INFO beam_jobs.cut: skipped 'b': its frames are those of 'a'")


def test_a_phones_rotated_video_is_stored_as_a_player_shows_it(tmp_path):
    # a portrait phone video: -90 degrees
    path = write_rotated_video(tmp_path / "clips" / "phone.mp4", marked_frame(32, 64))
    for flags, shape, corner, rotation in (([], (4, 64, 32, 3), (0, -1), 90),
                                           (["--keep_orientation"], (4, 32, 64, 3), (0, 0), 0)):
        out = tmp_path / f"out{len(flags)}"
        run_job(str(path), out, "--window", "4", "--frame_encoding", "raw", *flags)
        (example,) = read_examples(out)
        window = example["window"]
        assert window.shape == shape   # played upright: 64 high, 32 wide
        top = slice(0, 4)
        corner_block = window[0, top, slice(-4, None) if corner[1] else slice(0, 4)]
        assert corner_block.mean() > 200, window[0, :8, :8, 0]   # the white corner, turned
        (row,) = map(json.loads, open(sidecar(out, "videos")))
        assert row["rotation"] == rotation


def test_exif_orientations_1_to_8_are_applied_and_no_exif_is_stored(tmp_path):
    from PIL import Image

    upright = Image.fromarray(marked_frame(24, 32))
    write_oriented_images(tmp_path / "v", upright, "png")
    write_manifest(tmp_path / "m.jsonl", [{"video_id": "v", "frames": "v"}])
    run_job(str(tmp_path / "m.jsonl"), tmp_path / "out", "--window", "8",
            "--frame_encoding", "raw")
    (example,) = read_examples(tmp_path / "out")
    for o, frame in enumerate(example["window"], 1):
        np.testing.assert_array_equal(frame, np.asarray(upright), err_msg=f"orientation {o}")
    # a JPEG of the dataset's size is stored as it is, less its EXIF block
    os.makedirs(tmp_path / "j")
    exif = Image.Exif()
    exif[0x0112], exif[0x010F] = 1, "a camera"
    upright.save(tmp_path / "j" / "f0.jpg", exif=exif, quality=90)
    source = (tmp_path / "j" / "f0.jpg").read_bytes()
    assert b"Exif\x00\x00" in source
    write_manifest(tmp_path / "j.jsonl", [{"video_id": "j", "frames": "j"}])
    run_job(str(tmp_path / "j.jsonl"), tmp_path / "jpeg", "--window", "1",
            "--frame_encoding", "jpeg")
    (example,) = read_examples(tmp_path / "jpeg")
    (kept,) = example["window.bytes"]
    app1 = source.index(b"\xff\xe1")
    segment = source[app1:app1 + 2 + int.from_bytes(source[app1 + 2:app1 + 4], "big")]
    assert b"Exif\x00\x00" in segment and b"Exif" not in kept
    assert kept == source.replace(segment, b"")   # not re-encoded: only the EXIF went


def test_an_animated_gif_is_a_video_and_a_still_image_is_no_input(tmp_path, capsys):
    from PIL import Image

    frames = [Image.fromarray(f) for f in solid_frames(6)]
    # frame 2 is shown 300 ms: at --fps 10 its time is filled as any video's gap is, by
    # the first frame at or after each tick (guarantees.md#timestamps)
    frames[0].save(tmp_path / "anim.gif", save_all=True, append_images=frames[1:],
                   duration=[100, 100, 300, 100, 100, 100], loop=0)
    run_job(str(tmp_path / "*.gif"), tmp_path / "out", "--window", "8", "--fps", "10",
            "--frame_encoding", "raw")
    (example,) = read_examples(tmp_path / "out")
    assert [_level(f) for f in example["window"]] == [0, 1, 2, 3, 3, 3, 4, 5]
    # a still image is a frame, never read as a TFRecord
    frames[0].save(tmp_path / "still.png")
    line = job_line(capsys, "--input", tmp_path / "still.png", "--output_dir",
                    tmp_path / "refused", "--window", "2")
    assert "still.png' is an image, and an image is a frame, not a video" in line
    # an animated image among a folder's frames is a bad frame, not its first frame alone
    write_frame_folder(tmp_path / "v", solid_frames(4))
    os.replace(tmp_path / "anim.gif", tmp_path / "v" / "frame_2.gif")
    os.remove(tmp_path / "v" / "frame_2.png")
    write_manifest(tmp_path / "m.jsonl", [{"video_id": "v", "frames": "v/*"}])
    run_job(str(tmp_path / "m.jsonl"), tmp_path / "bad", "--window", "4",
            "--on_bad_frame", "mask", "--frame_encoding", "raw")
    (bad,) = map(json.loads, open(sidecar(tmp_path / "bad", "bad_frames")))
    assert "an animated image of 6 frames is a video, not a frame" in bad["reason"]


@pytest.mark.slow
def test_memory_paths_and_csv_manifests_with_relative_paths(tmp_path):
    from PIL import Image

    fs = fsspec.filesystem("memory")
    for i, frame in enumerate(solid_frames(5)):
        with fs.open(f"/mem-test/v/f{i}.png", "wb") as f:
            Image.fromarray(frame).save(f, format="PNG")
    write_frame_folder(tmp_path / "local", solid_frames(5, start=2))
    (tmp_path / "m.csv").write_text(
        "video_id,frames,labels,split\n"
        'm,memory://mem-test/v,"[0,1,2,3,4]",\n'
        'l,local,"[5,6,7,8,9]",test\n')
    run_job(str(tmp_path / "m.csv"), tmp_path / "out", "--window", "5", "--frame_encoding",
            "png", "--splits", "train=0.999,test=0.001")
    train, test = read_examples(tmp_path / "out"), read_examples(tmp_path / "out", "test")
    assert [e["video_id"] for e in train] == ["m"] and [e["video_id"] for e in test] == ["l"]
    assert [_level(f) for f in train[0]["window"]] == [0, 1, 2, 3, 4]
    assert test[0]["labels"].tolist() == [5, 6, 7, 8, 9]

    with fs.open("/mem-test/manifest.jsonl", "w") as f:
        f.write(json.dumps({"video_id": "m", "frames": "v", "labels": [0, 1, 2, 3, 4]}) + "\n")
    run_job("memory://mem-test/manifest.jsonl", tmp_path / "mem", "--window", "5")
    assert [e["video_id"] for e in read_examples(tmp_path / "mem")] == ["m"]


@pytest.mark.slow
def test_bad_videos_go_to_failures(tmp_path):
    write_frame_folder(tmp_path / "good", solid_frames(6))
    write_frame_folder(tmp_path / "big", solid_frames(6, size=(48, 64)))
    (tmp_path / "broken.mp4").write_bytes(b"\x00\x00\x00\x18ftypmp42 but nothing more")
    (tmp_path / "empty").mkdir()
    (tmp_path / "corrupt").mkdir()
    for i in range(3):
        (tmp_path / "corrupt" / f"f{i}.png").write_bytes(b"garbage")
    rows = [{"video_id": f"ok{i}", "frames": "good", "labels": [0] * 6, "metadata": [i]}
            for i in range(3)]   # one frame folder, three videos (their metadata)
    rows += [
        {"video_id": "short_labels", "frames": "good", "labels": [0] * 5, "metadata": [1]},
        {"video_id": "long_labels", "frames": "good", "labels": [0] * 7, "metadata": [1]},
        {"video_id": "meta", "frames": "good", "labels": [0] * 6, "metadata": [1, 2]},
        {"video_id": "size", "frames": "big", "labels": [0] * 6, "metadata": [1]},
        {"video_id": "unreadable", "video": "broken.mp4", "labels": [0] * 6, "metadata": [1]},
        {"video_id": "nothing", "frames": "empty", "labels": [], "metadata": [1]},
        {"video_id": "unreadable_frames", "frames": "corrupt", "labels": [0] * 3,
         "metadata": [1]},
        {"frames": "good"},
        {"video_id": "both", "frames": "good", "video": "broken.mp4"},
        {"video_id": "split", "frames": "good", "split": "holdout", "labels": [0] * 6,
         "metadata": [1]},
    ]
    write_manifest(tmp_path / "m.jsonl", rows)
    run_job(str(tmp_path / "m.jsonl"), tmp_path / "out", "--window", "3",
            "--max_failure_fraction", "0.9")
    reasons = {r["video_id"]: r["reason"]
               for r in map(json.loads, open(sidecar(tmp_path / "out", "failures")))}
    assert "5 labels, but the video has more frames" in reasons["short_labels"]
    assert "7 labels for 6 frames" in reasons["long_labels"]
    assert "metadata has 2 values, expected 1" in reasons["meta"]
    assert "48x64" in reasons["size"] and "--frame_size" in reasons["size"]
    assert "cannot decode video" in reasons["unreadable"]
    rows = {r["video_id"]: r for r in map(json.loads, open(sidecar(tmp_path / "out", "failures")))}
    assert (rows["unreadable"]["source"], rows["unreadable"]["record_index"]) == (
        str(tmp_path / "m.jsonl"), 7)   # video rows name the manifest and row too
    assert reasons["nothing"] == "no frames"
    assert reasons["unreadable_frames"] == "no readable frame"
    assert reasons[None] == "no video_id"
    assert "exactly one of frames and video" in reasons["both"]
    assert "'holdout' is not one of --splits" in reasons["split"]
    assert {e["video_id"] for e in read_examples(tmp_path / "out")} == {"ok0", "ok1", "ok2"}
    assert read_dataset_json(tmp_path / "out")["failures"] == 10


@pytest.mark.slow
def test_reader_gives_keras_tuples_and_float_pixels(tmp_path):
    write_frame_folder(tmp_path / "v", solid_frames(8))
    write_manifest(tmp_path / "m.jsonl", [{"video_id": "v", "frames": "v",
                                           "labels": list(range(8))}])
    run_job(str(tmp_path / "m.jsonl"), tmp_path / "out", "--window", "4", "--stride", "2",
            "--frame_encoding", "png")
    ds = readers.make_dataset(str(tmp_path / "out"), batch_size=3, float_pixels=True,
                              structure=(("window", "mask"), "labels"), seed=0)
    (frames, mask), labels = ds.element_spec
    assert frames.shape == (3, 4, 24, 32, 3) and frames.dtype == tf.float32
    assert mask.shape == (3, 4) and labels.shape == (3, 4)
    (frames, mask), labels = next(iter(ds))
    assert 0 <= frames.numpy().min() and frames.numpy().max() <= 1
    for window, label in zip(frames.numpy(), labels.numpy(), strict=True):
        np.testing.assert_allclose([f.mean() * 255 / 8 for f in window], label, atol=1e-3)


def test_shuffle_buckets_are_sized_from_real_frame_counts(tmp_path):
    """Frame lists are counted, folders listed, video files' headers read: no guess."""
    from beam_jobs.sources.manifest import read_manifest
    from beam_jobs.sources.media import FrameCodec
    from beam_jobs.sources.pixels import PixelFormat, estimate_frames, probe_pixel_format

    write_frame_folder(tmp_path / "v1", solid_frames(12))
    os.makedirs(tmp_path / "clips")
    write_video(tmp_path / "clips" / "c.mp4", solid_frames(30, size=(24, 32)), rate=10)
    write_manifest(tmp_path / "m.jsonl", [
        {"video_id": "a", "frames": "v1"}, {"video_id": "b", "frames": ["v1/frame_0.png"] * 5},
        {"video_id": "c", "video": "clips/c.mp4"}])
    entries, _ = read_manifest(str(tmp_path / "m.jsonl"), ["train"])
    fmt = probe_pixel_format(entries, PixelFormat(FrameCodec((0, 0), encoding="png")))
    assert estimate_frames(entries, fmt) == 12 + 5 + 30
    assert estimate_frames(entries, dataclasses.replace(fmt, fps=5)) == 12 + 5 + 15
    assert estimate_frames(entries, dataclasses.replace(fmt, max_frames=10)) == 10 + 5 + 10
    assert 0 < fmt.stored_frame_bytes < 24 * 32 * 3   # a PNG of a solid frame
