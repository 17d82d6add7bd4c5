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


class BadRecord(ValueError):
    """A record or video that cannot become windows; its message is the reason."""

    def __init__(self, reason: str, video_id: Optional[str] = None):
        super().__init__(reason)
        self.video_id = video_id


def failure(source: str, record_index: Optional[int], video_id: Optional[str],
            reason: str) -> dict:
    """One row of failures.jsonl."""
    return {"source": source, "record_index": record_index, "video_id": video_id,
            "reason": reason[:_MAX_REASON]}
