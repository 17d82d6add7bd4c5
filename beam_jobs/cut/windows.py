"""Windows cut from a stream of frames, holding at most a window of them: the windows
`readers.format.windows.window_starts` gives, without knowing the length up front.
Pure Python, property-tested against it."""
from __future__ import annotations

import collections
from typing import Iterable, Iterator, TypeVar

from readers.format.windows import Tail, window_starts

T = TypeVar("T")


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
