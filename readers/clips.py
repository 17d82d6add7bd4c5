"""Clips sampled at read time: `length` frames of each stored window, every `step`-th, from
an offset that is random per window and epoch or fixed (the start, the center).

The job fixes a window's length L when it writes; a trainer that wants temporal
augmentation (shorter clips at random places, a frame rate halved) asks the reader for a
`Clip` instead of a rebuild. The features that follow the frames (`PER_FRAME`: the window,
its mask, its labels) are cut alike; metadata, video_id and start stay whole, and
`clip_offset` says where in the window each clip begins (its first frame in the video is
start + clip_offset).

Both readers cut the same way; where the offsets come from differs, because they read in
different orders:
- readers.numpy: a pure function of (clip seed, epoch, window number), so any batch is
  the same whenever and wherever it is read, and a resume gives the same clips;
- tf.data: a seeded random stream, one value per batch in read order, new each
  iteration, kept in an iterator checkpoint.
Numpy only (the hash below is plain integer arithmetic).
"""
from __future__ import annotations

import dataclasses
from typing import Any, Optional, Sequence, Union

import numpy as np

from readers.arguments import one_of, seed_number, whole_number
from readers.format.features import PER_FRAME

OFFSETS = ("random", "start", "center")
CLIP_OFFSET = "clip_offset"    # what the readers name each clip's offset in its window
_MASK = 0xFFFFFFFF


def _mix(x: np.ndarray) -> np.ndarray:
    """A 32-bit integer hash (xor-shift-multiply, constants below 2**31 so that int64
    products never overflow)."""
    x = x ^ (x >> 16)
    x = (x * 0x7FEB352D) & _MASK
    x = x ^ (x >> 15)
    x = (x * 0x2C1B3C6D) & _MASK
    return x ^ (x >> 16)


@dataclasses.dataclass(frozen=True)
class Clip:
    """`length` frames of each window, every `step`-th, from `offset`: "random" (per
    window and epoch, from `seed`, a whole number in [0, 2**63) as every reader's),
    "start" or "center".

    A clip spans (length - 1) * step + 1 frames, which must fit in the stored window.
    Its numbers are checked and kept as Python ints (numpy integers too: a span in
    uint8 would wrap around and let a clip that cannot fit through)."""
    length: int
    step: int = 1
    offset: str = "random"
    seed: int = 0

    def __post_init__(self):
        # each number as the Python int it holds (frozen: set through object)
        for name in ("length", "step"):
            object.__setattr__(self, name, whole_number(f"Clip {name}", getattr(self, name), 1))
        object.__setattr__(self, "seed", seed_number("Clip seed", self.seed))
        one_of("Clip offset", self.offset, OFFSETS)

    @property
    def span(self) -> int:
        """The frames of the window from a clip's first frame to its last."""
        return (self.length - 1) * self.step + 1

    def check_fits(self, window: int) -> None:
        """ValueError when the clip does not fit in a window of `window` frames."""
        if self.span > window:
            raise ValueError(f"a clip of {self.length} frames every {self.step} spans "
                             f"{self.span} frames, more than the dataset's windows hold "
                             f"({window})")

    def offset_count(self, window: int) -> int:
        """How many offsets a window of `window` frames has for this clip (`check_fits`
        first: ValueError when it has none)."""
        self.check_fits(window)
        return window - self.span + 1

    def fixed_offset(self, window: int) -> int:
        """A "start" or "center" clip's offset in a window of `window` frames."""
        return 0 if self.offset == "start" else (self.offset_count(window) - 1) // 2

    def offsets(self, window: int, windows: Union[Sequence[int], np.ndarray], epoch: int
                ) -> np.ndarray:
        """The first frame of each clip of `windows` (window numbers in the split) in
        `epoch`, as int64: a pure function of (seed, epoch, window)."""
        count = self.offset_count(window)
        windows = np.asarray(windows, np.int64)
        if self.offset != "random":
            return np.full(len(windows), self.fixed_offset(window), np.int64)
        # the seed's high word hashed into its low one: 0 for a seed below 2**32 (_mix(0)
        # is 0), whose clips are those of before seeds had 63 bits
        seed = np.asarray(self.seed, np.int64)
        key = _mix(_mix(_mix(seed >> 32) ^ (seed & _MASK)) ^ (epoch & _MASK))
        return _mix(key ^ (windows & _MASK)) % count

    def frames(self, offset: int) -> slice:
        """The frames of the window that a clip from `offset` keeps."""
        return slice(offset, offset + self.span, self.step)


def checked(clip: Any) -> Optional[Clip]:
    """A reader's `clip` argument: None or a Clip; TypeError naming it otherwise (not
    an AttributeError from deep inside the reader)."""
    if clip is not None and not isinstance(clip, Clip):
        raise TypeError(f"clip must be a readers.clips.Clip or None, not "
                        f"{type(clip).__name__} {clip!r}")
    return clip


def clipped_shape(name: str, shape: tuple[int, ...], clip: "Clip | None") -> tuple[int, ...]:
    """A feature's shape as a reader gives it: a per-frame feature has the clip's frames."""
    return (clip.length, *shape[1:]) if clip is not None and name in PER_FRAME else shape
