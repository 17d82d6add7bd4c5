"""With --fps, a video's timestamps are bounded: a jump between two frames, or a timeline
past the duration its container declares, of more than --max_timestamp_gap seconds fails
the video with a row saying where; it never becomes thousands of copies of one frame."""
import itertools
import json
import os

import av
import pytest
from helpers import read_examples, run_job, sidecar
from input_files import solid_frames, write_video

pytestmark = pytest.mark.slow   # every test runs the job


FPS = 10


def _clip(tmp_path, name: str, times: list[float]) -> str:
    os.makedirs(tmp_path / "clips", exist_ok=True)
    return write_video(tmp_path / "clips" / name, solid_frames(len(times), size=(32, 48)),
                       times=times)


def _rows(out, kind: str) -> dict:
    with open(sidecar(out, kind)) as f:
        return {row["video_id"]: row for row in map(json.loads, f)}


def _levels(out) -> dict[str, list[int]]:
    """Each video's frames, in order, as the indexes they were made with."""
    frames: dict = {}
    for e in sorted(read_examples(out), key=lambda e: (e["video_id"], int(e["start"]))):
        frames.setdefault(e["video_id"], []).extend(int(round(f.mean() / 8)) for f in e["window"])
    return frames


def _longest_run(levels: list[int]) -> int:
    return max(len(list(run)) for _, run in itertools.groupby(levels))


def _steady(tmp_path) -> list[int]:
    """A clip with 20 ms of jitter on every other frame and a 3 s pause (under the
    default bound) after frame 14; the frames --fps 10 makes of it."""
    _clip(tmp_path, "steady.mp4", [i / 10 + (0.02 if i % 2 else 0) + (3 if i >= 15 else 0)
                                   for i in range(30)])
    return list(range(15)) + [15] * 31 + list(range(16, 30))   # 1.5 s .. 4.5 s: frame 15


def _the_failure(tmp_path) -> dict:
    """Run the job with --fps over the clips; the one failure row it writes."""
    run_job(str(tmp_path / "clips" / "*.mp4"), tmp_path / "out", "--window", "10",
            "--tail", "drop", "--fps", str(FPS), "--frame_encoding", "raw",
            "--max_failure_fraction", "0.5")
    (row,) = _rows(tmp_path / "out", "failures").values()
    return row


def test_a_timestamp_jump_fails_its_video_and_a_pause_under_the_bound_does_not(tmp_path):
    # 20 frames at 10 fps, then one stamped at 300 s: on main, 2,981 copies of it.
    _clip(tmp_path, "jump.mp4", [i / 10 for i in range(20)] + [300.0])
    steady = _steady(tmp_path)
    row = _the_failure(tmp_path)
    assert row["video_id"] == "jump"
    assert "jump of 298.1 s after 1.9 s" in row["reason"]
    assert "--max_timestamp_gap 5" in row["reason"]
    # The jump's windows cut before it was met are left out; the steady clip is whole.
    levels = _levels(tmp_path / "out")
    assert levels == {"steady": steady}
    assert _longest_run(levels["steady"]) <= 5 * FPS + 1
    assert _rows(tmp_path / "out", "videos")["steady"]["frames"] == len(steady)


def test_a_timeline_past_the_declared_duration_fails_unless_the_bound_is_raised(tmp_path):
    # Steps of 4 s, each under the default bound of 5 s; the encoder's delay leaves the
    # container declaring less than the frames' times say.
    times = [i / 10 for i in range(6)] + [4.5, 8.5, 12.5, 16.5]
    with av.open(_clip(tmp_path, "drift.mp4", times)) as container:
        declared = container.duration / av.time_base
    assert declared + 5 < times[-1] < declared + 10
    steady = _steady(tmp_path)
    row = _the_failure(tmp_path)
    assert row["video_id"] == "drift"
    assert f"stamped 16.5 s, past the {round(declared, 3):g} s the container declares" \
        in row["reason"]
    assert "--max_timestamp_gap 5" in row["reason"]
    assert _levels(tmp_path / "out") == {"steady": steady}

    run_job(str(tmp_path / "clips" / "drift.mp4"), tmp_path / "raised", "--window", "10",
            "--tail", "drop", "--fps", str(FPS), "--frame_encoding", "raw",
            "--max_timestamp_gap", "10")
    assert not os.path.getsize(sidecar(tmp_path / "raised", "failures"))
    (drift,) = _levels(tmp_path / "raised").values()
    made = list(range(6)) + [6] * 40 + [7] * 40 + [8] * 40 + [9] * 40   # 4 s: 40 copies
    assert drift == made[:160]                                         # whole windows
    assert _longest_run(drift) <= 10 * FPS + 1
