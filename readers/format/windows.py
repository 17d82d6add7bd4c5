"""A dataset's windows (`Window`, dataset.json's "window") and where they start in a
sequence of T frames: the job cuts them so, and a plain writer (tests/format_datasets.py)
the same. Pure Python, property-tested."""
from __future__ import annotations

import dataclasses
from typing import Literal

TAIL_POLICIES = ("align_end", "drop", "pad")
Tail = Literal["align_end", "drop", "pad"]


@dataclasses.dataclass(frozen=True)
class Window:
    """A dataset's windows: `length` frames each, one starting every `stride` frames, the
    end of a video cut by `tail` (TAIL_POLICIES; `window_starts` says how)."""
    length: int
    stride: int
    tail: Tail

    def starts(self, num_frames: int) -> list[int]:
        """Where the windows of a video of `num_frames` frames start."""
        return window_starts(num_frames, self.length, self.stride, self.tail)

    def to_json(self) -> dict:
        """dataset.json's "window"."""
        return {"length": self.length, "stride": self.stride, "tail": self.tail}


def window_starts(num_frames: int, length: int, stride: int, tail: Tail) -> list[int]:
    """Start frames of the windows cut from a sequence of `num_frames` frames.

    - drop: full windows at 0, S, 2S, ...
    - align_end: as drop, plus one full window ending at the last frame when the stride
      grid misses it (never a duplicate).
    - pad: windows at 0, S, ... until one reaches the last frame; windows running past
      the end are zero-padded and masked. A window never starts past the last frame,
      so with S > L the frames between windows are skipped, as under drop.

    A sequence shorter than L gives no window under drop and align_end, one padded window
    under pad. An empty sequence gives no window.
    """
    if length <= 0 or stride <= 0:
        raise ValueError(f"window length and stride must be > 0, got {length} and {stride}")
    if tail not in TAIL_POLICIES:
        raise ValueError(f"tail must be one of {TAIL_POLICIES}, got {tail!r}")
    if num_frames <= 0:
        return []
    if tail == "pad":
        last = max(0, -(-(num_frames - length) // stride)) * stride  # ceil to the grid
        return [s for s in range(0, last + 1, stride) if s < num_frames]
    if num_frames < length:
        return []
    starts = list(range(0, num_frames - length + 1, stride))
    if tail == "align_end" and starts[-1] != num_frames - length:
        starts.append(num_frames - length)
    return starts
