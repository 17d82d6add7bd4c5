"""The report's statistics that stream: the videos file row by row, the failures and
bad frames files row by row; the shard sizes dataset.json records (or one listing of the
directory, for a dataset whose dataset.json does not).

Nothing kept grows with the dataset: each distribution is a `Histogram` of at most
`Histogram.BINS` bins, reasons are counted by their kind (paths and numbers left out)
up to `MAX_REASONS` kinds, and at most `MAX_ROWS` rows of each side file are kept for
the page's tables. What the side files say is untrusted (they may come from elsewhere):
a line is at most videos_file.MAX_LINE bytes, a value kept or grouped at most
`MAX_TEXT` characters (in time linear in them), a count at most `MAX_COUNT`; past
those, the text is cut, or the part left out saying why. What is read is the dataset's
own files, through fsspec (local, gs://, any scheme), each once.
"""
from __future__ import annotations

import collections
import dataclasses
import functools
import json
import re
from typing import Any, Callable, Optional, TypeVar

import numpy as np

from readers import format as data_format
from readers.files import DatasetFiles

MAX_ROWS = 50          # rows of a side file shown in its table; the rest are counted
MAX_REASONS = 100      # kinds of reason counted apart; the rest are "other"
MAX_TEXT = 1000        # characters of a side file's value kept, grouped or shown
MAX_COUNT = 2**53      # a count from a side file past this is no count (nor exact as a float)
T = TypeVar("T")
# guarded(what, make, instead): make(), or `instead` where what it reads is broken
Guard = Callable[[str, Callable[[], T], T], T]
# What varies from row to row: a quoted name, a path (a word with a slash, matched only
# from a word's start, so that the time is linear in a reason's length), a number.
_VARYING = re.compile(r"'[^']*'|\"[^\"]*\"|(?<!\S)\S*[/\\]\S*?(?=[:,;.]?(?:\s|$))"
                      r"|\d+(?:\.\d+)?")


def count(value: Any) -> int:
    """`value`, a count a side file gives; ValueError unless it is a whole number from 0
    to MAX_COUNT: a file from elsewhere may claim 10**30 frames, which no histogram's
    edges hold (numpy's int64) nor a float names exactly."""
    if type(value) is not int or not 0 <= value <= MAX_COUNT:
        raise ValueError(f"{bounded(repr(value))} is not a count (0 to 2**53)")
    return value


def bounded(text: str) -> str:
    """`text` cut to MAX_TEXT characters (with an ellipsis when cut): what a side file
    says is kept, grouped and shown at this size, whatever its length."""
    return text if len(text) <= MAX_TEXT else text[:MAX_TEXT] + "…"


@dataclasses.dataclass
class Histogram:
    """Counts of whole numbers >= 0 in BINS bins of equal width from 0; when a value falls
    past the last bin the width doubles (pairs of bins merged), so memory is fixed
    whatever the stream, and each bin's count is exact."""
    BINS = 32
    width: int = 1
    counts: np.ndarray = dataclasses.field(
        default_factory=lambda: np.zeros(Histogram.BINS, np.int64))
    total: int = 0
    low: Optional[int] = None
    high: int = 0

    def add(self, value: int) -> None:
        """Count `value`; ValueError unless it is a whole number from 0 to MAX_COUNT
        (the bins' edges are then exact, and fit numpy's int64)."""
        value = count(value)
        while value >= self.width * self.BINS:
            self.counts = self.counts.reshape(-1, 2).sum(1)
            self.counts = np.concatenate([self.counts, np.zeros(self.BINS // 2, np.int64)])
            self.width *= 2
        self.counts[value // self.width] += 1
        self.total += 1
        self.low = value if self.low is None else min(self.low, value)
        self.high = max(self.high, value)

    def bins(self) -> tuple[np.ndarray, np.ndarray]:
        """(counts, edges) from the first bin with a value to the last: bin i holds
        [edges[i], edges[i + 1])."""
        first, used = (self.low or 0) // self.width, self.high // self.width + 1
        return self.counts[first:used], np.arange(first, used + 1) * self.width


@dataclasses.dataclass
class SplitVideos:
    """One split's videos as videos.jsonl gives them, streamed."""
    frames: Histogram = dataclasses.field(default_factory=Histogram)
    windows: Histogram = dataclasses.field(default_factory=Histogram)
    bad_frames: Histogram = dataclasses.field(default_factory=Histogram)
    videos: int = 0
    window_squares: int = 0    # sum of windows**2: the share of same-video neighbours

    def add(self, row: dict) -> None:
        """Count a videos file's row; ValueError naming the field of a value that is no
        count, with nothing of the row counted."""
        counts = {}
        for field in ("frames", "windows", "bad_frames"):
            try:
                counts[field] = count(row.get(field) or 0)
            except ValueError as e:
                raise ValueError(f"{field} {e}") from None
        self.videos += 1
        self.frames.add(counts["frames"])
        self.windows.add(counts["windows"])
        self.bad_frames.add(counts["bad_frames"])
        self.window_squares += counts["windows"] ** 2

    def neighbour_share(self, windows: int) -> float:
        """The share of neighbouring records of one video in a perfectly shuffled split
        of `windows`: sum over videos of (w / W) * ((w - 1) / (W - 1))."""
        if windows < 2:
            return 0.0
        return (self.window_squares - windows) / (windows * (windows - 1))


@dataclasses.dataclass
class SideFile:
    """One side file (failures or bad frames): its rows counted by reason, the first
    MAX_ROWS kept."""
    name: Optional[str]
    rows: int = 0
    by_reason: collections.Counter = dataclasses.field(default_factory=collections.Counter)
    first: list[dict] = dataclasses.field(default_factory=list)

    def add(self, row: dict) -> None:
        """Count a row by its reason's kind; keep it while fewer than MAX_ROWS are, each
        value but a number cut to MAX_TEXT characters (the file is untrusted: a reason
        of a megabyte is a line of 1,000 characters on the page)."""
        self.rows += 1
        kind = reason_kind(str(row.get("reason", "")))
        if kind not in self.by_reason and len(self.by_reason) >= MAX_REASONS:
            kind = "(other reasons)"
        self.by_reason[kind] += 1
        if len(self.first) < MAX_ROWS:
            self.first.append({key: value if type(value) in (int, float) else bounded(
                str(value)) for key, value in row.items()})


def reason_kind(reason: str) -> str:
    """A reason without what varies from row to row (paths, quoted names, numbers), so
    that rows of one cause count together: `cannot read /a/f_4.png: No such file` ->
    `cannot read …: No such file`. Of its first MAX_TEXT characters, in time linear in
    them."""
    return _VARYING.sub("…", reason[:MAX_TEXT])[:200]


@dataclasses.dataclass
class Collected:
    """Everything the page shows that is read by streaming, not by sampling windows."""
    shard_bytes: dict[str, int]                # shard file -> bytes (0: missing)
    videos: dict[str, SplitVideos]
    failures: SideFile
    bad_frames: SideFile

    def split_bytes(self, spec: data_format.DatasetSpec, split: str) -> int:
        return sum(self.shard_bytes.get(s.file, 0) for s in spec.splits[split].shards)


def _unguarded(what: str, make: Callable[[], T], instead: T) -> T:
    return make()


def collect(path: str, spec: data_format.DatasetSpec, guarded: Guard = _unguarded
            ) -> Collected:
    """One pass over the videos, failures and bad frames files; the shard sizes that
    dataset.json records (each uncompressed shard's), or else one listing. Each is read
    through `guarded`, so that a broken file leaves its part out (readers.report.build);
    by default its ValueError or OSError goes up."""
    files = DatasetFiles(path)
    return Collected(
        _shard_bytes(files, spec, guarded),
        guarded("the videos file", lambda: _videos(files, spec),
                {name: SplitVideos() for name in spec.splits}),
        *(guarded(f"the {kind.replace('_', ' ')} file",
                  functools.partial(side_file, files, spec, kind), SideFile(None))
          for kind in ("failures", "bad_frames")))


def _shard_bytes(files: DatasetFiles, spec: data_format.DatasetSpec, guarded: Guard
                 ) -> dict[str, int]:
    """Each shard's size: dataset.json's where it records every one (uncompressed
    shards), else from one listing (through `guarded`; 0 for a shard it lacks)."""
    shards = [s for split in spec.splits.values() for s in split.shards]
    if all(s.bytes is not None for s in shards):
        return {s.file: s.bytes for s in shards if s.bytes is not None}   # all
    listed = guarded("the shards' sizes", files.sizes, {})
    return {s.file: s.bytes if s.bytes is not None else listed.get(s.file, 0)
            for s in shards}


def _videos(files: DatasetFiles, spec: data_format.DatasetSpec) -> dict[str, SplitVideos]:
    """Each split's videos, from the videos file's rows, each checked as --verify does."""
    videos = {name: SplitVideos() for name in spec.splits}
    name = spec.sidecars.get("videos")
    if name:
        for row in data_format.videos_file.rows(lambda: files.reader(name), spec.splits):
            try:
                videos[row["split"]].add(row)
            except ValueError as e:   # a count past MAX_COUNT, or bad frames that are none
                raise ValueError(f"{name}: video {bounded(repr(row['video_id']))}: {e}"
                                 ) from None
    return videos


def side_file(files: DatasetFiles, spec: data_format.DatasetSpec, kind: str) -> SideFile:
    """The side file of `kind` (failures, bad_frames) that dataset.json names, streamed
    and counted by reason (readers.inspect's summary counts the failures so too)."""
    side = SideFile(spec.sidecars.get(kind))
    if side.name:
        for row in files.rows(side.name):
            side.add(row)
    return side


def flag_value(value: Any) -> str:
    """A flag's value as the page prints it: JSON, so lists and maps read as they were."""
    return value if isinstance(value, str) else json.dumps(value)
