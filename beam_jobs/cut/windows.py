"""Window planning: where fixed-length windows start in a sequence of T frames.

Pure Python, no Beam and no TensorFlow, so the rules are easy to test on their own.
"""
from __future__ import annotations

import collections
from typing import Iterable, Iterator, Literal, TypeVar

T = TypeVar("T")

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


def stream_windows(frames: Iterable[T], length: int, stride: int,
                   tail: Tail) -> Iterator[tuple[int, list[T]]]:
    """(start, frames) of each window of a stream, holding at most `length` frames.

    The same windows as `window_starts` over the stream's length, without knowing the
    length up front: full windows on the stride grid come out as soon as their last frame
    arrives; the tail policy's windows come at the end (they start at or after T - L, so
    they lie in the last `length` frames). A tail window under pad holds fewer frames.
    """
    recent: collections.deque = collections.deque(maxlen=length)
    last_start, count = -1, 0
    for count, frame in enumerate(frames, start=1):
        recent.append(frame)
        start = count - length
        if start >= 0 and start % stride == 0:
            last_start = start
            yield start, list(recent)
    first_in_recent = count - len(recent)
    for start in window_starts(count, length, stride, tail):
        if start > last_start:
            yield start, list(recent)[start - first_in_recent:]
