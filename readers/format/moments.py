"""The sums for the dataset's statistics (readers/format/channel_stats.py): what a cut
gives per video (`VideoMoments`) and a writer adds per split (`ExactMoments`; the job's
commit/split_stats.py).

Per channel (the last axis of a frame): the count of values, their sum and sum of
squares, min and max. A video's sums are float64, from numpy over its frames (the same
bits for the same video, whichever worker cuts it) or from a pixel histogram (whole
numbers, exact). The videos' sums are then added exactly, as integers in units of
2**-1074 (every float64 is a whole number of them), so that the total does not depend
on the order in which workers, bundles and merges add them: a rerun, another runner or
another number of workers writes the same dataset.json. The float64 figures are
rounded once, from the exact totals (mean = sum / n, m2 = sum of squares - sum**2 / n).

Their precision: each video's sums are rounded once; m2's relative error is about
2**-53 * (1 + mean**2 / variance), 1e-12 or better unless a channel's mean is a
thousand times its standard deviation. Pixels' sums are exact throughout.
"""
from __future__ import annotations

import dataclasses
import operator
from typing import NamedTuple, Sequence

import numpy as np

from readers.format.channel_stats import ChannelStats

PIXEL_VALUES = 256         # a uint8 channel's values: a histogram's bins
_UNIT_BITS = 1074          # every float64 is a whole number of 2**-1074
_MANTISSA_BITS = 53
_EXACT_ROWS = 1 << 10     # rows added as int64 at once: |m| < 2**53, so under 2**63
_MOST_DISTANCES = 64      # passes over a batch, one per distance; past them, one by one


class VideoMoments(NamedTuple):
    """One video's (or some of its frames') sums per channel, float64 [C] each."""
    frames: int
    count: int  # type: ignore[assignment]  # values per channel (hides tuple.count)
    total: np.ndarray      # the sum of the values
    squares: np.ndarray    # the sum of their squares
    low: np.ndarray        # min
    high: np.ndarray       # max

    @classmethod
    def of_values(cls, values: np.ndarray) -> "VideoMoments":
        """The sums of `values` [frames, ..., C] ([frames]: one channel)."""
        values = np.asarray(values)
        rows = values.reshape(-1, 1) if values.ndim == 1 else values.reshape(
            -1, values.shape[-1])
        if not len(rows):
            return _nothing(len(values), rows.shape[1])
        x = rows.astype(np.float64)
        with np.errstate(over="ignore", invalid="ignore"):
            total = x.sum(axis=0)       # row after row: the same bits on any CPU
            return cls(len(values), len(rows), total, _sum_of_squares(x),
                       np.asarray(rows.min(axis=0), np.float64),
                       np.asarray(rows.max(axis=0), np.float64))

    @classmethod
    def of_histogram(cls, histogram: np.ndarray, frames: int) -> "VideoMoments":
        """The sums of uint8 values from their histogram int64 [C, 256] (how many
        values of each channel are 0, 1, ... 255), exact as long as a video has fewer
        than 2**37 values of a channel (2**53 / 255**2)."""
        histogram = np.asarray(histogram, np.int64)
        count = int(histogram[0].sum())
        if not count:
            return _nothing(frames, len(histogram))
        values = np.arange(PIXEL_VALUES, dtype=np.int64)
        seen = histogram > 0
        return cls(frames, count, (histogram @ values).astype(np.float64),
                   (histogram @ (values * values)).astype(np.float64),
                   seen.argmax(axis=1).astype(np.float64),
                   (PIXEL_VALUES - 1 - seen[:, ::-1].argmax(axis=1)).astype(np.float64))

    def add(self, other: "VideoMoments") -> "VideoMoments":
        """Both sets of frames' sums (of one video: added in the order of its frames)."""
        if not other.count:
            return self._replace(frames=self.frames + other.frames)
        if not self.count:
            return other._replace(frames=self.frames + other.frames)
        return VideoMoments(self.frames + other.frames, self.count + other.count,
                            self.total + other.total, self.squares + other.squares,
                            np.minimum(self.low, other.low), np.maximum(self.high, other.high))


def _sum_of_squares(x: np.ndarray) -> np.ndarray:
    """Per column of x [rows, C], the sum of its squares, row after row: one pass where
    squaring then summing takes two. einsum adds a column's products in row order when
    there are several columns; one column it sums in its own order, so that one is
    squared, then summed as `total` is."""
    if x.shape[1] == 1:
        return (x * x).sum(axis=0)
    return np.einsum("ij,ij->j", x, x)


def _nothing(frames: int, channels: int) -> VideoMoments:
    nan = np.full(channels, np.nan)
    return VideoMoments(frames, 0, np.zeros(channels), np.zeros(channels), nan, nan.copy())


@dataclasses.dataclass
class ExactMoments:
    """Videos' sums added exactly, in any order (module docstring), per channel."""
    frames: int
    count: int
    total: list[int]       # the sum, in units of 2**-1074
    squares: list[int]     # the sum of squares, in units of 2**-1074
    low: np.ndarray
    high: np.ndarray
    nonfinite: np.ndarray  # bool: a NaN or Inf among the channel's values or sums

    @classmethod
    def empty(cls, channels: int) -> "ExactMoments":
        nan = np.full(channels, np.nan)
        return cls(0, 0, [0] * channels, [0] * channels, nan, nan.copy(),
                   np.zeros(channels, bool))

    @classmethod
    def of(cls, video: VideoMoments) -> "ExactMoments":
        """A video's sums, exact."""
        return cls.of_videos([video])

    @classmethod
    def of_videos(cls, videos: Sequence[VideoMoments]) -> "ExactMoments":
        """Videos' sums (of one set of channels) added exactly: what merging each one's
        `of` gives, in one vectorised pass (_exact_column_sums)."""
        frames = sum(video.frames for video in videos)
        counted = [video for video in videos if video.count]
        if not counted:
            return dataclasses.replace(cls.empty(len(videos[0].total)), frames=frames)
        sums = np.concatenate([np.stack([v.total for v in counted]),
                               np.stack([v.squares for v in counted])], axis=1)
        finite = np.isfinite(sums)
        channels = sums.shape[1] // 2
        nonfinite = ~(finite[:, :channels] & finite[:, channels:]).all(axis=0)
        units = _exact_column_sums(np.where(finite, sums, 0.0))
        return cls(frames, sum(video.count for video in counted), units[:channels],
                   units[channels:], np.min([v.low for v in counted], axis=0),
                   np.max([v.high for v in counted], axis=0), nonfinite)

    def merge(self, other: "ExactMoments") -> "ExactMoments":
        if not other.count:
            return dataclasses.replace(self, frames=self.frames + other.frames)
        if not self.count:
            return dataclasses.replace(other, frames=self.frames + other.frames)
        return ExactMoments(
            self.frames + other.frames, self.count + other.count,
            list(map(operator.add, self.total, other.total)),
            list(map(operator.add, self.squares, other.squares)),
            np.minimum(self.low, other.low), np.maximum(self.high, other.high),
            self.nonfinite | other.nonfinite)

    def stats(self) -> ChannelStats:
        """The figures, each rounded once from the exact sums: NaN mean and m2 where a
        value or a sum was not finite; m2 0 where min == max (one value throughout)."""
        n = self.count
        if not n:
            return dataclasses.replace(ChannelStats.empty(len(self.total)), frames=self.frames)
        mean = np.array([_ratio(t, n << _UNIT_BITS) for t in self.total])
        m2 = np.array([_ratio(max(0, (n * s << _UNIT_BITS) - t * t), n << 2 * _UNIT_BITS)
                       for t, s in zip(self.total, self.squares, strict=True)])
        m2[self.low == self.high] = 0.0
        mean[self.nonfinite] = m2[self.nonfinite] = np.nan
        return ChannelStats(self.frames, n, mean, m2, self.low.copy(), self.high.copy())


def _ratio(numerator: int, denominator: int) -> float:
    """numerator / denominator rounded once to float64 (Python's integer division is
    correctly rounded); +-Inf past float64's range."""
    try:
        return numerator / denominator
    except OverflowError:
        return float("inf") if numerator > 0 else float("-inf")


def _exact_column_sums(sums: np.ndarray) -> list[int]:
    """The exact sum of each column of finite float64 `sums` [rows, C], in units of
    2**-1074 (Python integers, whatever their size).

    Each value is a whole number m * 2**s of units (|m| < 2**53, frexp's mantissa). In a
    column, values whose s lies the same distance r above the column's lowest are added
    as int64, exactly while there are under 2**10 rows (done in such batches); the few
    sums, one per distinct r, are then added as Python integers. So a video costs a
    handful of numpy operations on its row, not a Python integer per channel; values so
    far apart in scale that the rows have over _MOST_DISTANCES distinct r are added one
    by one instead."""
    if len(sums) >= _EXACT_ROWS:
        return [sum(column) for column in zip(*(
            _exact_column_sums(sums[i:i + _EXACT_ROWS - 1])
            for i in range(0, len(sums), _EXACT_ROWS - 1)), strict=True)]
    fractions, exponents = np.frexp(sums)          # sums = fractions * 2**exponents
    mantissas = (fractions * (1 << _MANTISSA_BITS)).astype(np.int64)   # exact
    shifts = exponents.astype(np.int64) + (_UNIT_BITS - _MANTISSA_BITS)
    subnormal = shifts < 0          # a subnormal's mantissa ends in -shift zero bits
    if subnormal.any():
        mantissas[subnormal] >>= -shifts[subnormal]
        shifts[subnormal] = 0
    present = mantissas != 0
    lowest = np.where(present, shifts, np.iinfo(np.int64).max).min(axis=0)
    lowest[~present.any(axis=0)] = 0
    above = np.where(present, shifts - lowest, 0)
    distances = np.unique(above[present]).tolist()
    if len(distances) > _MOST_DISTANCES:   # scales far apart: a Python integer a value
        return [sum(map(operator.lshift, column, steps)) for column, steps in zip(
            mantissas.T.tolist(), shifts.T.tolist(), strict=True)]
    totals = [0] * sums.shape[1]
    for distance in distances:
        part = np.where(above == distance, mantissas, 0).sum(axis=0)
        for column in np.flatnonzero(part).tolist():
            totals[column] += int(part[column]) << (int(lowest[column]) + distance)
    return totals
