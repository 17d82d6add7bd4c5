"""A frame as a source hands it to the cut, and the failure of a whole video."""
from __future__ import annotations

from typing import Any, NamedTuple, Optional

import numpy as np


class Frame(NamedTuple):
    data: Any                            # as stored: an array, or encoded image bytes
    valid: bool = True                   # False: missing or unreadable (zeros, mask 0)
    label: Optional[np.ndarray] = None   # float32 [] or [C]; 0 where not valid
    where: Any = None                    # the frame's file, or its time in a video file
    reason: Optional[str] = None         # why it is not valid
    # Pixels: per channel, how many of the frame's pixels take each value 0..255 (int64
    # [C, 256]), for the dataset's statistics: an encoded frame's pixels are not in `data`.
    histogram: Optional[np.ndarray] = None


class BadRecord(ValueError):
    """A record or video that cannot become windows; its message is the reason."""

    def __init__(self, reason: str, video_id: Optional[str] = None):
        super().__init__(reason)
        self.video_id = video_id


def check_finite(values: np.ndarray, what: str) -> None:
    """BadRecord when `values` hold NaN or Inf."""
    if values.dtype.kind == "f" or values.dtype.name == "bfloat16":
        values = values.astype(np.float32, copy=False)
        # One pass, no boolean array: a NaN or an Inf makes the sum NaN or Inf. A sum
        # that overflows from finite values is told apart by the full check.
        with np.errstate(over="ignore", invalid="ignore"):
            if np.isfinite(np.sum(values)):
                return
        finite = np.isfinite(values)
        if not finite.all():
            raise BadRecord(f"{what} hold {int((~finite).sum())} NaN or Inf values "
                            "(pass --allow_nonfinite to keep them)")
