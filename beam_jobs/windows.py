"""Window planning: where fixed-length windows start in a sequence of T frames.

Pure numpy, no Beam and no TensorFlow, so the rules are easy to test on their own.
"""
from __future__ import annotations

from typing import Literal

import numpy as np

TAIL_POLICIES = ("align_end", "drop", "pad")
Tail = Literal["align_end", "drop", "pad"]


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


def window_mask(num_frames: int, start: int, length: int) -> np.ndarray:
    """float32 [length]: 1 for frames of the sequence, 0 for padding past its end."""
    return (np.arange(start, start + length) < num_frames).astype(np.float32)


def cut_window(sequence: np.ndarray, start: int, length: int) -> np.ndarray:
    """sequence[start:start+length], zero-padded at the end to exactly `length` frames."""
    window = sequence[start:start + length]
    missing = length - window.shape[0]
    if missing:
        pad = np.zeros((missing,) + sequence.shape[1:], dtype=sequence.dtype)
        window = np.concatenate([window, pad])
    return window
