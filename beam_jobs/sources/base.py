"""What every input kind hands the pipeline: a `Source` (its videos, what their windows
hold), and the videos an --append skips (`JoinKnown`). Frames and failure rows are
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
    # The ids to skip (--append: a PCollection of the dataset's ids; None: none) -> a
    # transform: the pipeline -> (videos, failure rows, the skipped videos' ids)
    read: Callable[[Optional[beam.PCollection]], beam.PTransform]
    stored_bytes: float                    # all frames as windows store them, an
                                           # estimate (the shuffle's buckets are sized by it)
    running_mode: str                      # --all_cores: how local workers run its work
    pad_frame: Any = None                  # None: zeros like a frame
    encoder: Optional[EncoderSpec] = None  # windows hold its latents of the frames
    total_videos: Optional[int] = None     # when known before the run
    frame: dict = dataclasses.field(default_factory=dict)  # dataset.json: one frame
    labels: Optional[dict] = None          # dataset.json: shape, names


NEW, KNOWN = "new", "known"   # JoinKnown's outputs


class JoinKnown(beam.PTransform):
    """(video id, value) pairs -> the values whose id is not among `known` (NEW, the main
    output), and the (id, value) pairs whose id is (KNOWN). `known`: a PCollection of
    ids, the dataset's with --append, any id any number of times. A join by id
    (CoGroupByKey): no worker holds every known id (3M at 2 TB), each group holds one
    id's values."""

    def __init__(self, known: beam.PCollection):
        super().__init__()
        self._known = known

    def expand(self, pairs):
        marks = self._known | "MarkKnown" >> beam.Map(lambda video_id: (video_id, None))
        return ({NEW: pairs, KNOWN: marks} | "JoinIds" >> beam.CoGroupByKey()
                | "Split" >> beam.FlatMap(_split_known).with_outputs(KNOWN, main=NEW))


def _split_known(joined):
    video_id, groups = joined
    known = any(True for _ in groups[KNOWN])
    for value in groups[NEW]:
        yield beam.pvalue.TaggedOutput(KNOWN, (video_id, value)) if known else value
