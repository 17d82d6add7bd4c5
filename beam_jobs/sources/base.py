"""What every input kind hands the pipeline: a `Source` (its videos, what their windows
hold), and the videos an --append skips (`SkipKnown`). Frames and failure rows are
core's (core/frames.py, core/records.py): the cut takes them too."""
from __future__ import annotations

import dataclasses
from typing import Any, Callable, Optional

import apache_beam as beam

from beam_jobs.encoders import EncoderSpec
from readers import format as data_format

SKIPPED = "skipped"    # the tagged output of the ids an --append's dataset already has


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


class SkipKnown(beam.DoFn):
    """Videos (anything with a `video_id`, its frames not yet read) -> those whose id is
    not in `known` (a side input: the dataset's ids); the others' ids go to SKIPPED."""

    def process(self, video, known=frozenset()):
        if video.video_id in known:
            yield beam.pvalue.TaggedOutput(SKIPPED, video.video_id)
        else:
            yield video
