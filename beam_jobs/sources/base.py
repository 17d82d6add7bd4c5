"""What every source hands the windowing step: frames, and the failure of a video."""
from __future__ import annotations

from typing import Any, NamedTuple, Optional

import numpy as np

FAILURES = "failures"   # the tagged output that carries failure rows
_MAX_REASON = 300


class Frame(NamedTuple):
    data: Any                            # as stored: an array, or encoded image bytes
    valid: bool = True                   # False: missing or unreadable (zeros, mask 0)
    label: Optional[np.ndarray] = None   # float32 [] or [C]; 0 where not valid
    where: Any = None                    # the frame's file, or its time in a video file
    reason: Optional[str] = None         # why it is not valid


class BadRecord(ValueError):
    """A record or video that cannot become windows; its message is the reason."""

    def __init__(self, reason: str, video_id: Optional[str] = None):
        super().__init__(reason)
        self.video_id = video_id


def failure(source: str, record_index: Optional[int], video_id: Optional[str],
            reason: str, records: int = 1) -> dict:
    """One row of failures.jsonl; `records`: how many input records or videos it stands
    for (more than one where a broken file took the rest of its records with it)."""
    return {"source": source, "record_index": record_index, "video_id": video_id,
            "reason": reason[:_MAX_REASON], "records": records}


def check_finite(values: np.ndarray, what: str) -> None:
    """BadRecord when `values` hold NaN or Inf."""
    if values.dtype.kind == "f" or values.dtype.name == "bfloat16":
        finite = np.isfinite(values.astype(np.float32, copy=False))
        if not finite.all():
            raise BadRecord(f"{what} hold {int((~finite).sum())} NaN or Inf values "
                            "(pass --allow_nonfinite to keep them)")
