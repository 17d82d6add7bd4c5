"""Manifests (.jsonl or .csv): one video a row, paths relative to the manifest.

Row fields: `video_id`; `frames` (a directory, a glob, or a list of image paths, in
order) or `video` (a video file); optional `labels` (an inline list, or the path of a
.csv or .npy file: one number or one fixed-length vector per frame); optional
`metadata` (fixed-length floats); optional `split`. A CSV carries lists as JSON strings.
"""
from __future__ import annotations

import csv
import dataclasses
import io
import json
import posixpath
import re
from typing import Any, Iterable, Optional, Union

import fsspec
import numpy as np

from beam_jobs.video import BadRecord, failure

IMAGE_SUFFIXES = (".jpg", ".jpeg", ".png", ".webp", ".bmp", ".gif", ".tif", ".tiff")
_GLOB_CHARS = re.compile(r"[*?\[]")


@dataclasses.dataclass(frozen=True)
class VideoEntry:
    """One manifest row, its paths resolved against the manifest's directory."""
    video_id: str
    source: str                                   # the manifest
    record_index: int                             # the row, from 0
    frames: Union[tuple[str, ...], str, None]     # image paths, or a directory or glob
    video: Optional[str]
    labels: Union[tuple, str, None]               # inline values, or a .csv/.npy path
    metadata: Optional[tuple[float, ...]]
    split: Optional[str]


def resolve(base: str, path: str) -> str:
    """`path` relative to the directory `base`, unless absolute or with a scheme."""
    if "://" in path or path.startswith("/"):
        return path
    return posixpath.join(base, path)


def natural_key(path: str) -> list:
    """frame_9 before frame_10: digit runs compare as numbers."""
    return [int(part) if part.isdigit() else part for part in re.split(r"(\d+)", path)]


def expand_frames(frames: Union[tuple[str, ...], str]) -> list[str]:
    """The ordered image paths of a `frames` field."""
    if not isinstance(frames, str):
        return list(frames)
    fs, path = fsspec.core.url_to_fs(frames)
    if _GLOB_CHARS.search(path):
        found = fs.glob(path)
    else:
        found = [p for p in fs.find(path, maxdepth=1)
                 if p.lower().endswith(IMAGE_SUFFIXES)]
    return sorted((fs.unstrip_protocol(p) if "://" in frames else p for p in found),
                  key=natural_key)


def load_labels(labels: Union[tuple, str]) -> np.ndarray:
    """float32 [T] or [T, C] from inline values or a .npy / .csv file."""
    if isinstance(labels, str):
        with fsspec.open(labels, "rb") as f:
            data = f.read()
        if labels.lower().endswith(".npy"):
            values = np.load(io.BytesIO(data), allow_pickle=False)
        else:
            text = data.decode("utf-8")
            try:
                values = np.loadtxt(io.StringIO(text), delimiter=",", ndmin=1)
            except ValueError:  # a header line
                values = np.loadtxt(io.StringIO(text), delimiter=",", ndmin=1, skiprows=1)
    else:
        values = labels
    array = np.asarray(values, dtype=np.float32)
    if array.ndim not in (1, 2):
        raise BadRecord(f"labels must be one number or one vector per frame, got shape "
                        f"{list(array.shape)}")
    return array


def _list_or_path(value: Any, field: str, base: str) -> Union[tuple, str, None]:
    if value is None or value == "":
        return None
    if isinstance(value, str) and value.lstrip().startswith("["):
        try:
            value = json.loads(value)
        except json.JSONDecodeError as e:
            raise BadRecord(f"{field} is not a JSON list: {e}") from None
    if isinstance(value, str):
        return resolve(base, value)
    if isinstance(value, list):
        return tuple(value)
    raise BadRecord(f"{field} must be a list or a path, got {type(value).__name__}")


def parse_row(row: dict, source: str, index: int, base: str,
              splits: Iterable[str]) -> VideoEntry:
    video_id = str(row.get("video_id") or "").strip()
    if not video_id:
        raise BadRecord("no video_id")
    frames = _list_or_path(row.get("frames"), "frames", base)
    video = row.get("video") or None
    if (frames is None) == (video is None):
        raise BadRecord("give exactly one of frames and video", video_id)
    if isinstance(frames, tuple):
        frames = tuple(resolve(base, str(p)) for p in frames)
    try:
        labels = _list_or_path(row.get("labels"), "labels", base)
        metadata = _list_or_path(row.get("metadata"), "metadata", base)
        if isinstance(metadata, str):
            raise BadRecord("metadata must be a list of numbers")
        metadata = None if metadata is None else tuple(float(v) for v in metadata)
    except (BadRecord, TypeError, ValueError) as e:
        raise BadRecord(str(e), video_id) from None
    split = row.get("split") or None
    if split is not None and split not in splits:
        raise BadRecord(f"split {split!r} is not one of --splits {sorted(splits)}", video_id)
    return VideoEntry(video_id, source, index, frames,
                      None if video is None else resolve(base, str(video)), labels, metadata,
                      split)


def read_manifest(path: str, splits: Iterable[str]) -> tuple[list[VideoEntry], list[dict]]:
    """The entries of a manifest, and a failure row for each row that is not one."""
    with fsspec.open(path, "r", encoding="utf-8") as f:
        text = f.read()
    base = posixpath.dirname(path)
    if path.lower().endswith(".csv"):
        rows: list = list(csv.DictReader(io.StringIO(text)))
    else:
        rows = []
        for line in text.splitlines():
            if not line.strip():
                continue
            try:
                rows.append(json.loads(line))
            except json.JSONDecodeError as e:
                rows.append(BadRecord(f"not a JSON object: {e}"))
    entries, failures = [], []
    for index, row in enumerate(rows):
        try:
            if not isinstance(row, dict):
                raise row if isinstance(row, BadRecord) else BadRecord("not a JSON object")
            entries.append(parse_row(row, path, index, base, list(splits)))
        except BadRecord as e:
            failures.append(failure(path, index, e.video_id, str(e)))
    return entries, failures
