"""The sums for the statistics of the frames one video stores (moments.py,
channel_stats.py): each frame of its windows once, whatever the number of windows that
hold it, and only those whose mask is 1 (not padding, not a bad frame); frames in no
window (between windows when the stride is longer than a window, after the last one
under `--tail drop`) are not stored and not counted.

Computed where the frames already are in memory, once a video: a latent sequence as a
whole (one vectorised pass over the frames its windows cover), a streamed video a
window at a time over the frames that window adds (its window array already stacked),
pixels from the histograms the source made as it stored them (an encoded frame's pixels
never reach the cut).
"""
from __future__ import annotations

from typing import Any, Optional, Sequence

import numpy as np

from readers.format.channel_stats import stats_shapes
from readers.format.moments import VideoMoments


class StoredFrameStats:
    """One video's sums, built as its windows are cut, in order of start.

    `features`: the dataset's (FeatureSpecs); `pixels`: its windows hold pixels whose
    frames carry their histograms (the job's `Frame.histogram`: int64 [C, 256]),
    counted instead of the values; other frames are not looked at.
    """

    def __init__(self, features: Sequence, pixels: bool):
        self._stats: dict[str, VideoMoments] = {}
        self._names = tuple(stats_shapes(features))
        self._pixels = pixels
        self._histogram: Optional[np.ndarray] = None   # int64 [C, 256], the counted frames
        self._pixel_frames = 0
        self._end = 0             # the frames before it are counted

    def add_sequence(self, sequence: np.ndarray, starts: Sequence[int], length: int) -> None:
        """A video whose frames are all valid and in one array [T, ...], cut into
        windows of `length` at `starts`: the frames they cover, each once, in as few
        passes as the windows leave runs of frames (one when they overlap or touch)."""
        end = None
        runs: list[list[int]] = []
        for start in starts:
            stop = min(start + length, len(sequence))
            if end is not None and start <= end:
                runs[-1][1] = end = max(end, stop)
            else:
                runs.append([start, stop])
                end = stop
        for start, stop in runs:
            self._merge("window", VideoMoments.of_values(sequence[start:stop]))

    def add_window(self, start: int, frames: Sequence[Any], values: dict) -> None:
        """A window cut from a stream: `frames` the video's frames it holds (fewer than
        its length for a padded tail window), `values` its stacked window, mask and
        labels. The frames past the last window's end are new: those with mask 1 are
        counted."""
        first = max(0, self._end - start)
        if first >= len(frames):
            return
        self._end = start + len(frames)
        valid = np.asarray(values["mask"][first:len(frames)]) == 1
        rows = slice(first, len(frames)) if valid.all() else first + np.flatnonzero(valid)
        for name in self._names:
            if name == "window" and self._pixels:
                self._add_histograms([f for f, ok in zip(frames[first:], valid, strict=True) if ok])
            else:
                self._merge(name, VideoMoments.of_values(np.asarray(values[name])[rows]))

    def _add_histograms(self, frames: list[Any]) -> None:
        for frame in frames:
            if frame.histogram is None:
                raise ValueError("a pixel frame came without its histogram: the source "
                                 "must give each valid pixel frame one (Frame.histogram)")
            self._histogram = (frame.histogram if self._histogram is None
                               else self._histogram + frame.histogram)
        self._pixel_frames += len(frames)

    def _merge(self, name: str, moments: VideoMoments) -> None:
        self._stats[name] = self._stats[name].add(moments) if name in self._stats else moments

    def result(self) -> dict[str, VideoMoments]:
        """{feature: VideoMoments} of the frames counted (a feature none of whose
        frames were counted is left out)."""
        if self._histogram is not None:
            self._merge("window", VideoMoments.of_histogram(self._histogram,
                                                            self._pixel_frames))
            self._histogram, self._pixel_frames = None, 0
        return dict(self._stats)
