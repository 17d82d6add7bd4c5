"""Videos whose id comes more than once: no copy of them is used; and the window keys that
the shard writer must leave out.

Two videos with one id would share window keys and a split, and a reader could not tell
them apart, so every copy is a failure. Duplicates are only known once every video is
cut, which is after their windows entered the shuffle: their keys are handed to the
shard writer as a side input (`DroppedKeys`), which leaves those windows out, and each
copy is reported as a failure. The windows that a video which failed half-way had
already emitted (`Abandoned`) are left out the same way, and such a video counts as a
copy of its id: its keys are those of any other video with that id.

Nothing here gathers every video: ids are counted per key, only the ids that come more
than once (and their copies) go on, and the side input holds only the keys to drop.
"""
from __future__ import annotations

from typing import Iterable, NamedTuple

import apache_beam as beam

from beam_jobs.core.records import VideoCount, failure
from beam_jobs.cut.examples import CutConfig


class Duplicates(NamedTuple):
    """The PCollections that `FindDuplicates` gives."""
    unique: beam.PCollection     # VideoCount of every video whose id came once
    failures: beam.PCollection   # one failure row per copy of an id that came more than once
    dropped: beam.PCollection    # one dict {split: frozenset of keys}: a singleton side input


def copy_failures(video_id: str, copies: Iterable[VideoCount], times: int) -> list[dict]:
    """One failure row per copy of a video id that came `times` times."""
    copies = sorted(copies, key=lambda c: (c.source, -1 if c.record_index is None
                                           else c.record_index))
    where = "; ".join(f"{c.source}" + ("" if c.record_index is None else
                                       f" #{c.record_index}") for c in copies[:4])
    return [failure(c.source, c.record_index, video_id,
                    f"the video id appears {times} times ({where}): no copy is used")
            for c in copies]


class _MergeKeys(beam.CombineFn):
    """(split, keys) rows -> {split: frozenset of keys}."""

    def create_accumulator(self) -> dict:
        return {}

    def add_input(self, accumulator: dict, row) -> dict:
        split, keys = row
        accumulator.setdefault(split, set()).update(keys)
        return accumulator

    def merge_accumulators(self, accumulators) -> dict:
        merged: dict = {}
        for accumulator in accumulators:
            for split, keys in accumulator.items():
                merged.setdefault(split, set()).update(keys)
        return merged

    def extract_output(self, accumulator: dict) -> dict[str, frozenset[int]]:
        return {split: frozenset(keys) for split, keys in accumulator.items()}


class FindDuplicates(beam.PTransform):
    """(VideoCounts, Abandoned) -> `Duplicates`."""

    def __init__(self, config: CutConfig):
        super().__init__()
        self._config = config

    def expand(self, inputs) -> Duplicates:
        videos, abandoned = inputs
        config = self._config
        repeated = (
            (videos | "VideoIds" >> beam.Map(lambda v: v.video_id),
             abandoned | "AbandonedIds" >> beam.Map(lambda a: a.video_id))
            | "AllIds" >> beam.Flatten()
            | "CountIds" >> beam.combiners.Count.PerElement()
            | "Repeated" >> beam.Filter(lambda id_count: id_count[1] > 1))
        parted = videos | "SetAside" >> beam.FlatMap(
            lambda v, times: [beam.pvalue.TaggedOutput("copies", v) if v.video_id in times
                              else v], beam.pvalue.AsDict(repeated)).with_outputs(
                                  "copies", main="unique")
        copies = parted.copies
        failures = (copies
                    | "KeyCopies" >> beam.Map(lambda v: (v.video_id, v))
                    | "GroupCopies" >> beam.GroupByKey()
                    | "CopyFailures" >> beam.FlatMap(
                        lambda group, times: copy_failures(group[0], group[1],
                                                           times[group[0]]),
                        beam.pvalue.AsDict(repeated)))
        dropped = (
            (copies | "KeysOfCopies" >> beam.Map(lambda v: (v.split, [
                config.key(v.video_id, start) for start in config.starts(v.frames)])),
             abandoned | "KeysOfAbandoned" >> beam.Map(lambda a: (a.split, a.keys)))
            | "AllDropped" >> beam.Flatten()
            | "DroppedKeys" >> beam.CombineGlobally(_MergeKeys()))
        return Duplicates(parted.unique, failures, dropped)
