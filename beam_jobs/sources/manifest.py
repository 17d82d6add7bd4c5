"""Manifests (.jsonl or .csv): one video a row, paths relative to the manifest.

Row fields: `video_id`; `frames` (a directory, a glob, or a list of image paths, in
order) or `video` (a video file); optional `labels` (an inline list, or the path of a
.csv or .npy file: one number or one fixed-length vector per frame); optional
`metadata` (fixed-length floats); optional `split`. A CSV carries lists as JSON strings.
Every other key is the row's own field (`fuel`, `camera`, ...): the job does not read it,
but keeps it, as given, in the video's row of the videos file (`fields`), bounded there
as its metadata is (readers.format.video_rows).

A row that cannot become a video (bad JSON, bytes that are not UTF-8, a lone surrogate,
an id with spaces around it, a missing field, fields or metadata past what the videos
file keeps) is a failure row; a file that is not a manifest at all is an error before
any work.
"""
from __future__ import annotations

import csv
import dataclasses
import io
import json
import posixpath
import re
from typing import Any, Iterable, Optional, Sequence, Union

import fsspec
import numpy as np

from beam_jobs.core import ids
from beam_jobs.core.frames import BadRecord
from beam_jobs.core.records import failure
from readers.format import video_rows

IMAGE_SUFFIXES = (".jpg", ".jpeg", ".png", ".webp", ".bmp", ".gif", ".tif", ".tiff")
_GLOB_CHARS = re.compile(r"[*?\[]")
MAX_LABEL_FILE_BYTES = 256 << 20
JOB_KEYS = ("video_id", "frames", "video", "labels", "metadata", "split")   # the rest: fields


class ManifestError(ValueError):
    """The file is not a manifest this job reads; the message says why."""


@dataclasses.dataclass(frozen=True)
class VideoEntry:
    """One manifest row, its paths resolved against the manifest's directory."""
    video_id: str
    source: str                                   # the manifest (or the video file)
    record_index: Optional[int]                   # the row, from 0 (None: no manifest)
    frames: Union[tuple[str, ...], str, None]     # image paths, or a directory or glob
    video: Optional[str]
    labels: Union[tuple, str, None]               # inline values, or a .csv/.npy path
    metadata: Optional[tuple[float, ...]]
    split: Optional[str]
    # the row's keys but JOB_KEYS, as given (None: no manifest row, a video file given
    # alone); left out of the hash, which a dict cannot have
    fields: Optional[dict[str, Any]] = dataclasses.field(default=None, hash=False)


def resolve(base: str, path: str) -> str:
    """`path` relative to the directory `base`, unless absolute or with a scheme."""
    if "://" in path or path.startswith("/"):
        return path
    return posixpath.join(base, path)


def natural_key(path: str) -> list:
    """frame_9 before frame_10: digit runs compare as numbers."""
    return [int(part) if part.isdigit() else part for part in re.split(r"(\d+)", path)]


def expand_frames(frames: Union[tuple[str, ...], str]) -> list[str]:
    """The ordered image paths of a `frames` field. A folder's or a glob's hidden files
    (a name starting with '.', macOS's AppleDouble `._f003.png` among them) are never
    frames; a list is taken as given."""
    if not isinstance(frames, str):
        return list(frames)
    try:
        fs, path = fsspec.core.url_to_fs(frames)
        if _GLOB_CHARS.search(path):
            found = fs.glob(path)
        else:
            found = [p for p in fs.find(path, maxdepth=1)
                     if p.lower().endswith(IMAGE_SUFFIXES)]
    except (OSError, ValueError) as e:
        raise BadRecord(f"cannot list the frames {frames}: {type(e).__name__}: {e}") from None
    return sorted((fs.unstrip_protocol(p) if "://" in frames else p for p in found
                   if not p.rstrip("/").rsplit("/", 1)[-1].startswith(".")), key=natural_key)


class Labels:
    """Per-frame labels: float32 [T] or [T, C], and their names when a CSV header gave them."""

    def __init__(self, values: np.ndarray, names: Optional[tuple[str, ...]] = None):
        self.values, self.names = values, names


def load_labels(labels: Union[tuple, str]) -> Labels:
    """Labels from inline values or a .npy / .csv file; BadRecord with the reason when
    they cannot be read as one number or one fixed-length vector per frame."""
    names = None
    try:
        if isinstance(labels, str):
            values, names = _label_file(labels)
        else:
            values = labels
        array = np.asarray(values, dtype=np.float32)
    except BadRecord:
        raise
    except FileNotFoundError:
        raise BadRecord(f"labels file {labels} does not exist") from None
    except (ValueError, TypeError, OSError) as e:
        what = labels if isinstance(labels, str) else "inline labels"
        raise BadRecord(f"labels ({what}) are not numbers per frame: "
                        f"{str(e).splitlines()[0][:120]}") from None
    _check_label_shape(array, names, labels)
    return Labels(array, names)


def _label_file(path: str) -> tuple[Any, Optional[tuple[str, ...]]]:
    """The values of a .npy or .csv labels file, and a CSV's column names; BadRecord
    for a file over MAX_LABEL_FILE_BYTES (the reader's errors go to load_labels)."""
    with fsspec.open(path, "rb") as f:
        data = f.read(MAX_LABEL_FILE_BYTES + 1)
    if len(data) > MAX_LABEL_FILE_BYTES:
        raise BadRecord(f"labels file {path} is larger than "
                        f"{MAX_LABEL_FILE_BYTES >> 20} MB")
    if path.lower().endswith(".npy"):
        return np.load(io.BytesIO(data), allow_pickle=False), None
    return _csv_labels(data, path)


def _check_label_shape(array: np.ndarray, names: Optional[tuple[str, ...]],
                       labels: Union[tuple, str]) -> None:
    """BadRecord unless the labels are one number or one vector a frame, with a name a
    column where a file names them."""
    if array.ndim not in (1, 2):
        raise BadRecord(f"labels must be one number or one vector per frame, got shape "
                        f"{list(array.shape)}")
    if names is not None and len(names) != (array.shape[1] if array.ndim == 2 else 1):
        raise BadRecord(f"labels file {labels}: {len(names)} column names for "
                        f"{array.shape[1] if array.ndim == 2 else 1} columns")


def _csv_labels(data: bytes, path: str) -> tuple[list, Optional[tuple[str, ...]]]:
    """Rows of numbers, after at most one header line of column names."""
    rows, names = _csv_label_rows(data, path)
    values = []
    for number, row in enumerate(rows, start=2 if names else 1):
        parsed = _numbers(row)
        if parsed is None:
            raise BadRecord(f"labels file {path}: row {number} is not numbers: "
                            f"{','.join(row)[:60]!r}")
        values.append(parsed if len(parsed) > 1 else parsed[0])
    widths = {len(v) if isinstance(v, list) else 1 for v in values}
    if len(widths) > 1:
        raise BadRecord(f"labels file {path}: rows have {sorted(widths)} columns")
    return values, names


def _csv_label_rows(data: bytes, path: str
                    ) -> tuple[list[list[str]], Optional[tuple[str, ...]]]:
    """A labels CSV's rows that are not blank, and its column names where its first row
    is not numbers; BadRecord for a file that is not UTF-8 text."""
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError:
        raise BadRecord(f"labels file {path} is not UTF-8 text") from None
    rows = [row for row in csv.reader(io.StringIO(text)) if row and any(c.strip() for c in row)]
    if rows and not _numbers(rows[0]):
        return rows[1:], tuple(c.strip() for c in rows[0])
    return rows, None


def _numbers(row: list[str]) -> Optional[list[float]]:
    try:
        return [float(c) for c in row]
    except ValueError:
        return None


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


def _not_text(value: Any) -> Optional[str]:
    """The first string in `value` (a field's JSON value) that is not valid Unicode."""
    if isinstance(value, str):
        return None if ids.is_text(value) else value
    if isinstance(value, dict):
        value = [*value, *value.values()]
    if isinstance(value, list):
        return next(filter(None, map(_not_text, value)), None)
    return None


def parse_row(row: dict, source: str, index: int, base: str,
              splits: Iterable[str]) -> VideoEntry:
    """The entry of one row, or BadRecord naming the field at fault. An id is used as
    given but for its Unicode normal form (`ids.video_id`): one with spaces around it is
    refused, never stripped, so that no id changes without a word."""
    video_id = _video_id(row)
    frames, video = _frames_or_video(row, base, video_id)
    try:
        frames = _frame_paths(frames, base)
        labels = _list_or_path(row.get("labels"), "labels", base)
        metadata = _metadata(row, base)
    except (BadRecord, TypeError, ValueError) as e:
        raise BadRecord(str(e) if isinstance(e, (BadRecord, video_rows.RowError)) else
                        f"metadata must be a list of numbers: {e}", video_id) from None
    split = row.get("split") or None
    if split is not None and split not in splits:
        raise BadRecord(f"split {split!r} is not one of --splits {sorted(splits)}", video_id)
    fields = {key: value for key, value in row.items() if key not in JOB_KEYS}
    try:
        video_rows.check_fields(fields)
    except video_rows.RowError as e:
        raise BadRecord(str(e), video_id) from None
    return VideoEntry(video_id, source, index, frames,
                      None if video is None else resolve(base, video), labels, metadata,
                      split, fields)


def _video_id(row: dict) -> str:
    """The row's id in its Unicode normal form. BadRecord for a field name or value that
    is not valid Unicode text (with the id when it is text), no id, or one with spaces
    around it."""
    video_id = row.get("video_id")
    video_id = "" if video_id is None else str(video_id)
    for name, value in row.items():
        bad = _not_text(name) or _not_text(value)
        if bad is not None:
            raise BadRecord(f"{ids.printable(name)} is not valid Unicode text (a lone "
                            f"surrogate): '{ids.printable(bad)}'",
                            video_id if ids.is_text(video_id) else None)
    if not video_id.strip():
        raise BadRecord("no video_id")
    if video_id != video_id.strip():
        raise BadRecord(f"video_id {video_id!r} has spaces around it; ids are used as "
                        "given, never stripped (remove them in the manifest)", video_id)
    return ids.video_id(video_id)


def _frames_or_video(row: dict, base: str, video_id: str
                     ) -> tuple[Union[tuple, str, None], Optional[str]]:
    """The row's frames (a list, or a path resolved against `base`) and video (a path as
    given): BadRecord unless it has exactly one of them, and a video is a string."""
    frames = _list_or_path(row.get("frames"), "frames", base)
    video = row.get("video") or None
    if (frames is None) == (video is None):
        raise BadRecord("give exactly one of frames and video", video_id)
    if not (video is None or isinstance(video, str)):
        raise BadRecord(f"video must be a path, got {type(video).__name__}", video_id)
    return frames, video


def _frame_paths(frames: Union[tuple, str, None], base: str) -> Union[tuple, str, None]:
    """`frames` with a list's paths resolved against `base`; BadRecord for a list of
    anything but paths."""
    if not isinstance(frames, tuple):
        return frames
    if not all(isinstance(p, str) for p in frames):
        raise BadRecord("frames must be a list of paths")
    return tuple(resolve(base, p) for p in frames)


def _metadata(row: dict, base: str) -> Optional[tuple[float, ...]]:
    """The row's metadata as floats; BadRecord for a path, RowError for more values than
    the videos file keeps, TypeError or ValueError for a value that is no number."""
    metadata = _list_or_path(row.get("metadata"), "metadata", base)
    if isinstance(metadata, str):
        raise BadRecord("metadata must be a list of numbers")
    if metadata is None:
        return None
    video_rows.check_metadata(len(metadata))
    return tuple(float(v) for v in metadata)


_REQUIRED = "video_id, and frames or video"


def _jsonl_rows(data: bytes, path: str) -> list:
    rows: list = []
    for number, line in enumerate(data.split(b"\n"), start=1):
        if not line.strip():
            continue
        try:
            text = line.decode("utf-8-sig" if not rows else "utf-8")
        except UnicodeDecodeError as e:
            rows.append(BadRecord(f"line {number} is not UTF-8 text ({e.reason} at byte "
                                  f"{e.start})"))
            continue
        try:
            row = json.loads(text)
        except json.JSONDecodeError as e:
            rows.append(BadRecord(f"line {number} is not a JSON object: {e}"))
            continue
        rows.append(row if isinstance(row, dict) else
                    BadRecord(f"line {number} is a JSON {type(row).__name__}, not an object"))
    if rows and all(isinstance(r, BadRecord) for r in rows):
        raise ManifestError(f"{path} is not a JSON-lines manifest (one JSON object per line "
                            f"with {_REQUIRED}): {rows[0]}")
    return rows


def _csv_rows(data: bytes, path: str) -> list:
    text = data.decode("utf-8-sig", errors="surrogateescape")
    reader = csv.DictReader(io.StringIO(text))
    _check_csv_header(reader.fieldnames, path)
    return [_csv_row(row, reader.line_num) for row in reader]


def _check_csv_header(fieldnames: Optional[Sequence[str]], path: str) -> None:
    """ManifestError unless a CSV's header has video_id, and frames or video (names
    compared without the spaces around them)."""
    columns = [c.strip() for c in fieldnames or []]
    if "video_id" not in columns or not {"frames", "video"} & set(columns):
        raise ManifestError(f"{path} is not a manifest: a CSV manifest needs the columns "
                            f"{_REQUIRED}; its header has {columns[:8]}")


def _csv_row(row: dict, line: int) -> Union[dict, BadRecord]:
    """A CSV row with its column names stripped; BadRecord naming `line` when a value is
    not UTF-8 text."""
    row = {(k or "").strip(): v for k, v in row.items()}
    if any(isinstance(v, str) and not ids.is_text(v) for v in row.values()):
        return BadRecord(f"row {line} is not UTF-8 text")
    return row


def read_manifest(path: str, splits: Iterable[str]) -> tuple[list[VideoEntry], list[dict]]:
    """The entries of a manifest, and a failure row for each row that is not one.
    ManifestError when the file is not a manifest at all."""
    with fsspec.open(path, "rb") as f:
        data = f.read()
    if b"\x00" in data[:4096]:
        raise ManifestError(f"{path} is a binary file, not a manifest")
    base = posixpath.dirname(path)
    rows = _csv_rows(data, path) if path.lower().endswith(".csv") else _jsonl_rows(data, path)
    entries, failures = [], []
    for index, row in enumerate(rows):
        try:
            if isinstance(row, BadRecord):
                raise row
            entries.append(parse_row(row, path, index, base, list(splits)))
        except BadRecord as e:
            failures.append(failure(path, index, e.video_id, str(e)))
    return entries, failures
