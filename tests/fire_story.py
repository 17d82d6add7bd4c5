"""The fire story in small, as the selection tests read it (test_select.py,
test_window_tables.py, through conftest.py's `fire`): its dataset, made by the job, and
the selection the docs make of it."""
import os

import numpy as np
from helpers import run_job
from input_files import write_frame_folder, write_manifest

from readers.numpy import Select

WINDOW = 16

# The docs' selection: at least 12 valid frames, one experiment held out, one video left
# out.
STORY = Select(min_valid_frames=12, exclude_videos=["exp3/run2"],
               where=lambda row: not row["video_id"].startswith("exp2/"))


def fields(v: int) -> dict:
    """The manifest's own fields of the fire story's video `v`: what the job does not read."""
    return {"fuel": ("pine", "oak")[v // 4], "site": ("Köln", "Montréal")[v % 2],
            "wind": {"speed": v * 0.5, "gusts": [v, 2 * v]}, "notes": None}


def write(root) -> str:
    """The fire story's dataset under `root`, its path: 8 videos of 3 experiments
    (`exp1/...`), frames 6x8 with some missing (masked: --on_bad_frame mask), per-frame
    labels, metadata [v % 2, exp], fields of its own (`fields`); windows of 16 every 4,
    the tail padded, 6 shards."""
    rng = np.random.default_rng(49)
    rows = []
    for v in range(8):
        video_id, length = f"exp{v % 3 + 1}/run{v}", 14 + 3 * v
        folder = root / video_id.replace("/", "_")
        paths = write_frame_folder(folder, list(rng.integers(0, 256, (length, 6, 8, 3),
                                                             np.uint8)))
        for gone in rng.choice(length, v % 4 * 2, replace=False):   # 0 to 6 missing
            os.remove(paths[gone])
        rows.append({"video_id": video_id, "frames": paths,
                     "labels": [float(100 + t) for t in range(length)],
                     "metadata": [float(v % 2), float(v % 3 + 1)], **fields(v)})
    write_manifest(root / "m.jsonl", rows)
    run_job(str(root / "m.jsonl"), root / "out", "--window", str(WINDOW), "--stride", "4",
            "--tail", "pad", "--frame_encoding", "raw", "--on_bad_frame", "mask",
            "--splits", "train=1.0", "--num_shards", "6")
    return str(root / "out")
