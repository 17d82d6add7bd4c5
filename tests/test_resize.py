"""--resize fast against --resize exact: close to it, turned the same way, each frame
decoded once however many windows hold it. (--resize exact keeping the bytes of a job
before the flag is pinned in test_pinned_bytes.py.)"""
import json
import os

import numpy as np
import pytest
from helpers import assert_verified, read_dataset_json, read_examples, run_job
from input_files import (
    marked_frame,
    solid_frames,
    write_frame_folder,
    write_manifest,
    write_oriented_images,
    write_rotated_video,
    write_video,
)
from PIL import Image

from beam_jobs import make_shards
from beam_jobs.job.errors import Refused
from beam_jobs.sources import media, video_files

BOUND_DB = 35.0   # the bound docs/benchmarks.md states


def _psnr(fast: np.ndarray, exact: np.ndarray) -> float:
    mse = np.mean((fast.astype(np.float64) - exact.astype(np.float64)) ** 2)
    return float("inf") if mse == 0 else 10 * np.log10(255 ** 2 / mse)


def _scenes(count: int, size=(128, 192)) -> list[np.ndarray]:
    """Frames like the benchmark's (benchmarks/pixel_sample.py), small: smooth colour
    gradients, sensor-like noise and a disc that moves."""
    rng = np.random.default_rng(7)
    y, x = np.mgrid[:size[0], :size[1]].astype(np.float32) / size[1]
    frames = []
    for t in range(count):
        base = np.stack([128 + 100 * np.sin(6 * x + 3 * y + t / 5),
                         128 + 100 * np.sin(4 * y - 5 * x), 128 + 100 * np.cos(7 * x * y)], -1)
        base += rng.normal(0, 6, base.shape)
        cy, cx = 40 + 3 * t, 60 + 5 * t
        base[np.hypot(y * size[1] - cy, x * size[1] - cx) < 20] = (40, 220, 90)
        frames.append(np.clip(base, 0, 255).astype(np.uint8))
    return frames


def _stored(out) -> dict[str, np.ndarray]:
    """video id -> its frames [T, H, W, C], from windows of every frame once."""
    return {e["video_id"]: e["window"] for e in read_examples(out)}


@pytest.mark.slow
def test_fast_resizing_stays_within_the_bound_of_exact_for_jpeg_png_and_video(tmp_path):
    """128x192 frames stored at 40x60 (3.2x: a JPEG decoded at 1/2 scale, a PNG reduced
    by 3, each then resampled; the video scaled by swscale)."""
    frames = _scenes(6)
    for fmt in ("jpg", "png"):
        os.makedirs(tmp_path / fmt)
        for i, frame in enumerate(frames):
            Image.fromarray(frame).save(tmp_path / fmt / f"f{i}.{fmt}", quality=90)
    write_video(tmp_path / "v.mp4", frames)
    write_manifest(tmp_path / "m.jsonl", [{"video_id": "jpg", "frames": "jpg"},
                                          {"video_id": "png", "frames": "png"},
                                          {"video_id": "mp4", "video": "v.mp4"}])
    stored = {}
    for path in ("fast", "exact"):
        run_job(str(tmp_path / "m.jsonl"), tmp_path / path, "--window", "6", "--frame_size",
                "40x60", "--frame_encoding", "raw", "--resize", path)
        assert read_dataset_json(tmp_path / path)["flags"]["resize"] == path
        stored[path] = _stored(tmp_path / path)
    for video in ("jpg", "png", "mp4"):
        fast, exact = stored["fast"][video], stored["exact"][video]
        assert fast.shape == exact.shape == (6, 40, 60, 3)
        assert not np.array_equal(fast, exact), video   # the fast path did run
        for i in range(6):
            assert _psnr(fast[i], exact[i]) >= BOUND_DB, (video, i, _psnr(fast[i], exact[i]))


def _white_corner(frame: np.ndarray) -> tuple[int, int]:
    """(row, column) of the frame's brightest quarter-sized corner: 0 or -1 each."""
    h, w = frame.shape[0] // 4, frame.shape[1] // 4
    corners = {(r, c): frame[slice(0, h) if r == 0 else slice(-h, None),
                             slice(0, w) if c == 0 else slice(-w, None)].mean()
               for r in (0, -1) for c in (0, -1)}
    return max(corners, key=corners.get)


@pytest.mark.slow
def test_fast_resizing_turns_frames_as_exact_does(tmp_path):
    """JPEGs with EXIF orientations 1 to 8 (the decoder scales them before they are
    turned: 5 to 8 swap width and height) and a phone's video with a display matrix of
    -90 degrees (scaled before its quarter turn) come out upright, as exact stores them."""
    mark = (16, 24)   # a quarter of each side
    write_oriented_images(tmp_path / "v", Image.fromarray(marked_frame(64, 96, mark)), "jpg",
                          quality=95)
    write_manifest(tmp_path / "m.jsonl", [{"video_id": "v", "frames": "v"}])
    # decoded 64x96, played 96 high
    phone = write_rotated_video(tmp_path / "clips" / "phone.mp4", marked_frame(64, 96, mark))
    for path in ("fast", "exact"):
        run_job(str(tmp_path / "m.jsonl"), tmp_path / path, "--window", "8",
                "--frame_size", "16x24", "--frame_encoding", "raw", "--resize", path)
        run_job(phone, tmp_path / f"phone_{path}", "--window", "4",
                "--frame_size", "48x32", "--frame_encoding", "raw", "--resize", path)
    (fast,), (exact,) = read_examples(tmp_path / "fast"), read_examples(tmp_path / "exact")
    assert not np.array_equal(fast["window"], exact["window"])   # decoded at 1/4 scale
    for o in range(1, 9):
        assert _white_corner(fast["window"][o - 1]) == _white_corner(
            exact["window"][o - 1]) == (0, 0), o
        assert _psnr(fast["window"][o - 1], exact["window"][o - 1]) >= BOUND_DB, o
    (fast,), (exact,) = (read_examples(tmp_path / f"phone_{p}") for p in ("fast", "exact"))
    assert fast["window"].shape == exact["window"].shape == (4, 48, 32, 3)
    assert _white_corner(exact["window"][0]) == _white_corner(fast["window"][0]) == (0, -1)
    assert _psnr(fast["window"][0], exact["window"][0]) >= BOUND_DB


@pytest.mark.slow
def test_a_frame_in_two_windows_is_decoded_resized_and_stored_once(tmp_path, monkeypatch):
    """Windows of 4 every 2: frames 2 to 7 of 10 are in two windows each, yet every
    frame file is opened once, every video frame converted once, and every frame stored
    (resized and encoded) once. Counted, not timed."""
    write_manifest(tmp_path / "m.jsonl", [{"video_id": "f", "frames": "f"},
                                          {"video_id": "v", "video": "v.mp4"}])
    os.makedirs(tmp_path / "f")
    for i, frame in enumerate(_scenes(10, size=(48, 64))):
        Image.fromarray(frame).save(tmp_path / "f" / f"f{i}.png")
    write_video(tmp_path / "v.mp4", _scenes(10, size=(48, 64)))
    opened, converted, stored = [], [], []
    real_open, real_upright = Image.open, video_files._upright
    real_store, real_store_image = media.FrameCodec.store, media.FrameCodec.store_image
    monkeypatch.setattr(Image, "open", lambda fp, *a, **k: opened.append(
        os.path.basename(str(getattr(fp, "name", "memory")))) or real_open(fp, *a, **k))
    monkeypatch.setattr(video_files, "_upright", lambda frame, *a: converted.append(
        frame.pts) or real_upright(frame, *a))
    monkeypatch.setattr(media.FrameCodec, "store", lambda codec, image: stored.append(
        image.size) or real_store(codec, image))
    monkeypatch.setattr(media.FrameCodec, "store_image", lambda codec, image: stored.append(
        image.size) or real_store_image(codec, image))   # a frame, with its histogram
    make_shards.run(["--input", str(tmp_path / "m.jsonl"), "--output_dir",
                     str(tmp_path / "out"), "--window", "4", "--stride", "2",
                     "--frame_size", "24x32"])
    monkeypatch.undo()   # before the reader decodes the stored frames to verify them
    assert_verified(tmp_path / "out")
    windows = read_examples(tmp_path / "out")
    assert sorted((e["video_id"], int(e["start"])) for e in windows) == [
        (v, s) for v in "fv" for s in (0, 2, 4, 6)]
    # the launcher looks at the first video's first frame once, to fix the schema
    assert len(opened) == 10 + 1
    assert len(converted) == len(set(converted)) == 10
    # 10 frame files and 10 video frames; the launcher's first frame and its padding frame
    assert len(stored) == 10 + 10 + 1 + 1


@pytest.mark.slow
def test_an_append_resizes_as_the_dataset_did(tmp_path, caplog):
    """--resize changes stored bytes, so an append must use the dataset's; a dataset
    written before the flag was resized exactly; without --frame_size it is moot."""
    write_frame_folder(tmp_path / "v", solid_frames(4, size=(48, 64)))
    write_manifest(tmp_path / "m.jsonl", [{"video_id": "v", "frames": "v"}])
    caplog.set_level("INFO")
    for out, size in (("resized", ["--frame_size", "24x32"]), ("kept", [])):
        run_job(str(tmp_path / "m.jsonl"), tmp_path / out, "--window", "4", *size)
        argv = ["--input", str(tmp_path / "m.jsonl"), "--output_dir", str(tmp_path / out),
                "--window", "4", *size]
        meta = read_dataset_json(tmp_path / out)
        assert meta["flags"]["resize"] == "fast"
        del meta["flags"]["resize"]   # as a job before the flag wrote it
        (tmp_path / out / "dataset.json").write_text(json.dumps(meta, indent=2) + "\n")
        if size:
            with pytest.raises(Refused, match='--resize "fast" here, "exact" in'):
                make_shards.run([*argv, "--append"])
            make_shards.run([*argv, "--append", "--resize", "exact"])
        else:
            make_shards.run([*argv, "--append"])
        assert "nothing new" in caplog.text
        caplog.clear()
