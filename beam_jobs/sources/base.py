"""What every input kind hands the pipeline: a `Source` (its videos, what their windows
hold), frames, and the failure of a video."""
from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Any, Callable, NamedTuple, Optional

import numpy as np

from beam_jobs import ids

if TYPE_CHECKING:
    import apache_beam as beam

    from beam_jobs.encoders import EncoderSpec
    from readers import format as data_format

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


class SourceError(ValueError):
    """The input as a whole cannot be read (no readable record, not a manifest, an
    encoder that cannot serve): the job stops before any work. The message starts with
    the flag at fault."""


@dataclasses.dataclass(frozen=True)
class Source:
    """What the pipeline needs of an input kind, built by the kind itself from the flags,
    so that the pipeline knows nothing of codecs, record formats or labels."""
    features: list[data_format.FeatureSpec]
    # The ids to skip (--append: a side input of the dataset's ids; None: none) -> a
    # transform: the pipeline -> (videos, failure rows, the skipped videos' ids)
    read: Callable[[Optional[beam.pvalue.AsSideInput]], beam.PTransform]
    stored_bytes: float                    # all frames as windows store them, an
                                           # estimate (the shuffle's buckets are sized by it)
    running_mode: str                      # --all_cores: how local workers run its work
    pad_frame: Any = None                  # None: zeros like a frame
    encoder: Optional[EncoderSpec] = None  # windows hold its latents of the frames
    total_videos: Optional[int] = None     # when known before the run
    frame: dict = dataclasses.field(default_factory=dict)  # dataset.json: one frame
    labels: Optional[dict] = None          # dataset.json: shape, names


def failure(source: str, record_index: Optional[int], video_id: Optional[str],
            reason: str, records: int = 1) -> dict:
    """One row of failures.jsonl; `records`: how many input records or videos it stands
    for (more than one where a broken file took the rest of its records with it). Its
    text is valid Unicode (`ids.printable`), whatever names the source, the id and the
    reason quote."""
    return {"source": ids.printable(source), "record_index": record_index,
            "video_id": None if video_id is None else ids.printable(video_id),
            "reason": ids.printable(reason)[:_MAX_REASON], "records": records}


def check_finite(values: np.ndarray, what: str) -> None:
    """BadRecord when `values` hold NaN or Inf."""
    if values.dtype.kind == "f" or values.dtype.name == "bfloat16":
        finite = np.isfinite(values.astype(np.float32, copy=False))
        if not finite.all():
            raise BadRecord(f"{what} hold {int((~finite).sum())} NaN or Inf values "
                            "(pass --allow_nonfinite to keep them)")
