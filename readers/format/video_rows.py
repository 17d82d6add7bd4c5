"""What a video's row of the videos file holds besides the job's facts (since format 7):
the video's metadata as its windows carry it, and its manifest row's own fields (every
key the job does not read), so that `Select(where=)` chooses by them without reading a
shard. Both are bounded, so that a row stays far under the file's MAX_LINE whatever the
input, and both are strict JSON (no NaN). The job writes them, and a video past a bound
is a failure row naming the field; a row of an earlier format lacks both keys.
"""
from __future__ import annotations

import json
from typing import Any, Optional

import numpy as np

MAX_METADATA = 1024      # values: at most 17 KiB of JSON (17 bytes each, with ", ")
MAX_FIELDS = 16 << 10    # bytes of the fields' JSON, as the row writes it (ASCII)
KEYS = ("metadata", "fields")


class RowError(ValueError):
    """A video's metadata or manifest fields that its row cannot hold, in one line naming
    the field."""


def check_metadata(length: int, name: str = "metadata") -> None:
    """RowError when a video's metadata, the field `name`, has more than MAX_METADATA
    values."""
    if length > MAX_METADATA:
        raise RowError(f"{name} has {length:,} values, more than the {MAX_METADATA:,} its "
                       "row of the videos file keeps")


def metadata_values(metadata: Any) -> list[Optional[float]]:
    """A video's metadata (float32 values, or None: it has none) as its row holds it:
    each the shortest decimal that reads back as that float32 (0.1, not
    0.10000000149011612), so that `np.float32(row["metadata"])` is what the windows
    carry; null for a NaN or an infinity (which strict JSON cannot write and only
    --allow_nonfinite keeps)."""
    if metadata is None:
        return []
    return [float(str(value)) if np.isfinite(value) else None
            for value in np.asarray(metadata, np.float32).ravel()]


def check_fields(fields: dict[str, Any]) -> None:
    """RowError naming the field when a manifest row's own fields cannot be its row's
    `fields`: one holds a NaN or an infinity (JSON lines parse them, strict JSON has
    neither), or their JSON is more than MAX_FIELDS bytes (then the largest is named)."""
    sizes = {}
    for key, value in fields.items():
        try:
            sizes[key] = len(json.dumps(value, allow_nan=False))
        except ValueError:
            raise RowError(f"the manifest row's field {key!r} holds NaN or Infinity, which "
                           "JSON cannot write") from None
    size = len(json.dumps(fields))
    if size > MAX_FIELDS:
        largest = max(sizes, key=lambda key: sizes[key])
        raise RowError(f"the manifest row's own fields are {size:,} bytes of JSON, more than "
                       f"the {MAX_FIELDS:,} its row of the videos file keeps ({largest!r} is "
                       f"{sizes[largest]:,})")
