"""A dataset's videos file checked against its dataset.json: each line a JSON row with a
video id, a split of the dataset, windows and frames; each id on one row; and per split
the videos with windows, those without, and the windows dataset.json counts. The job
checks it before an --append reads any video, `readers.inspect --verify` after any run.

One streaming pass: a line is read only up to `MAX_LINE` bytes, and what is kept per row
is an 8-byte hash of its id (24 MB at 3M rows); the hashes are sorted once at the end to
find an id listed twice, and only then is the file read again to name both lines.
"""
from __future__ import annotations

import hashlib
import json
from typing import BinaryIO, Callable, Iterator

import numpy as np

from readers.format.spec import DatasetSpec

MAX_LINE = 1 << 20   # a row the job writes is a few hundred bytes
_FIELDS = {"video_id": str, "split": str, "windows": int, "frames": int}


class VideosFileError(ValueError):
    """What is wrong with a videos file (a line, an id listed twice, the counts), in one
    line without the file's name."""


def lines(open_file: Callable[[], BinaryIO]) -> Iterator[tuple[int, bytes]]:
    """(line number from 1, line) of the file, each at most MAX_LINE bytes; read in
    blocks (any binary file: local, Beam's, fsspec's), so that a file without newlines
    is never held whole (VideosFileError naming the line past MAX_LINE). Every JSON-lines
    side file is read through this: the videos file here, failures and bad frames in
    readers.files."""
    with open_file() as f:
        number, pending = 0, b""
        while True:
            block = f.read(MAX_LINE)
            parts = (pending + block).split(b"\n")
            pending = parts.pop()
            for line in parts:
                number += 1
                if len(line) > MAX_LINE:
                    raise VideosFileError(f"line {number} is longer than {MAX_LINE:,} bytes")
                yield number, line
            if len(pending) > MAX_LINE:
                raise VideosFileError(f"line {number + 1} is longer than {MAX_LINE:,} bytes")
            if not block:
                break
        if pending:
            yield number + 1, pending


def _row(line: bytes, number: int, splits) -> dict:
    try:
        row = json.loads(line)
    except ValueError as e:   # not UTF-8 (UnicodeDecodeError) or not JSON
        raise VideosFileError(f"line {number} is not a JSON row "
                              f"({str(e).splitlines()[0][:80]})") from None
    if not isinstance(row, dict):
        raise VideosFileError(f"line {number} is not a JSON object")
    for field, kind in _FIELDS.items():
        value = row.get(field)
        if type(value) is not kind or (isinstance(value, int) and value < 0):
            raise VideosFileError(f"line {number} has no {field!r} "
                                  f"({'a count' if kind is int else 'a string'})")
    if row["split"] not in splits:
        raise VideosFileError(f"line {number}: split {row['split']!r} is not one of "
                              f"dataset.json's {sorted(splits)}")
    return row


def rows(open_file: Callable[[], BinaryIO], splits) -> Iterator[dict]:
    """The file's rows in order, each checked (an id, a split of `splits`, counts >= 0);
    VideosFileError naming the line of the first that is not."""
    for number, line in lines(open_file):
        yield _row(line, number, splits)


def _id_hash(video_id: str) -> int:
    return int.from_bytes(hashlib.blake2b(video_id.encode("utf-8", "surrogatepass"),
                                          digest_size=8).digest(), "little")


def _check_once(open_file: Callable[[], BinaryIO], hashes: np.ndarray) -> None:
    """VideosFileError naming the two lines of an id listed twice, if any (ids whose
    hashes only collide pass)."""
    hashes.sort()
    equal = hashes[1:][hashes[1:] == hashes[:-1]]
    if not equal.size:
        return
    suspects, first = set(equal.tolist()), dict[str, int]()   # id -> its first line
    for number, line in lines(open_file):
        video_id = json.loads(line)["video_id"]
        if _id_hash(video_id) in suspects:
            if video_id in first:
                raise VideosFileError(f"lines {first[video_id]} and {number} both list "
                                      f"video {video_id!r}")
            first[video_id] = number


def check(open_file: Callable[[], BinaryIO], spec: DatasetSpec) -> None:
    """VideosFileError saying what is wrong with the videos file `open_file` opens
    (binary, with readline), against `spec`, in one line without the file's name.
    FileNotFoundError when it is missing."""
    listed = {split: (s.videos, s.skipped_short, s.windows) for split, s in spec.splits.items()}
    found = {split: [0, 0, 0] for split in spec.splits}
    hashes = []
    for row in rows(open_file, spec.splits):
        counts = found[row["split"]]
        counts[0 if row["windows"] else 1] += 1
        counts[2] += row["windows"]
        hashes.append(_id_hash(row["video_id"]))
    _check_once(open_file, np.array(hashes, dtype=np.uint64))
    for split, counts in found.items():
        if tuple(counts) != listed[split]:
            raise VideosFileError(
                f"split {split!r} has {counts[0]} videos with windows, {counts[1]} without "
                f"and {counts[2]} windows here, dataset.json says {listed[split][0]}, "
                f"{listed[split][1]} and {listed[split][2]}")
