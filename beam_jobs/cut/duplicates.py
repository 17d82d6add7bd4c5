"""Videos whose id comes more than once: no copy of them is used; videos whose content
another video has (the same frame digest, cut/examples.py): one is kept; and the window
keys that the shard writer must leave out.

Two videos with one id would share window keys and a split, and a reader could not tell
them apart, so every copy is a failure. Duplicates are only known once every video is
cut, which is after their windows entered the shuffle: their keys are handed to the
shard writer as a side input (`DroppedKeys`), which leaves those windows out, and each
copy is reported as a failure. The windows that a video which failed half-way had
already emitted (`Abandoned`) are left out the same way, and such a video counts as a
copy of its id: its keys are those of any other video with that id.

A video whose frames are those of a video the dataset has (an --append's `known`
digests), or of another video of this run with a smaller id, is an alias: it is skipped
(as a known id is) and its windows are left out, so one recording reached by two globs,
a wider glob or a new file name is stored once, under one id, in one split.

Nothing here gathers every video: ids are counted per key, only the ids that come more
than once (and their copies) go on, and the side input holds only the keys to drop.
"""
from __future__ import annotations

import logging
from typing import Any, Iterable, NamedTuple, Optional

import apache_beam as beam

from beam_jobs.core import progress
from beam_jobs.core.records import VideoCount, failure
from beam_jobs.cut.config import CutConfig

_LOG = logging.getLogger("beam_jobs.cut")
ALIASES_LOGGED = 20   # lines naming an alias and its video, per worker process
# The counter of aliases, which the launcher's summary reports (job/outcome.py): they
# are also among the skipped videos dataset.json counts, with the ids an --append skips.
DUPLICATE_VIDEOS = "videos_skipped_as_duplicates"
_ALIASES = "aliases"
# The (split, keys) rows of windows to leave out, and the side input they make, as Beam
# is told they are typed. A window key is unsigned 64-bit (readers/format/keys.py), and the coder
# Beam gives an `int` it finds in an annotation, VarIntCoder, is signed 64-bit: a key
# of 2**63 or more fails the job (Beam 2.78 reads the annotations that `from __future__
# import annotations` leaves as strings, `_keys`'s among them). Told Any, Beam takes
# FastPrimitivesCoder, which takes any int.
_KEY_ROWS = tuple[str, Iterable[Any]]
_DROPPED = dict[str, Any]


class Duplicates(NamedTuple):
    """The PCollections that `FindDuplicates` gives."""
    unique: beam.PCollection     # VideoCount of every video whose id and content came once
    failures: beam.PCollection   # one failure row per copy of an id that came more than once
    dropped: beam.PCollection    # one dict {split: frozenset of keys}: a singleton side input
    aliases: beam.PCollection    # the id of each video whose content another has
    bad_frames: beam.PCollection # rows of bad_frames.jsonl, but those of aliases


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


def _keys(video: VideoCount, config: CutConfig) -> tuple[str, list[int]]:
    """(split, keys) of the windows a video gave."""
    return video.split, [config.key(video.video_id, start)
                         for start in config.windows.starts(video.frames)]


def _keep_one(element):
    """(digest, {"new": VideoCounts, "known": ids}) -> the one video kept (none when the
    dataset has the content), then each other as an alias of the one kept."""
    _, groups = element
    videos = sorted(groups["new"], key=lambda v: v.video_id)
    kept = min(groups.get("known", ()), default=None)
    for video in videos:
        if kept is None:
            kept = video.video_id
            yield video
        else:
            yield beam.pvalue.TaggedOutput(_ALIASES, (video, kept))


class _LogAliases(beam.DoFn):
    """One line per alias, naming both ids, up to ALIASES_LOGGED per worker process; each
    counted (DUPLICATE_VIDEOS)."""
    logged = 0

    def process(self, alias):
        video, kept = alias
        progress.counter(DUPLICATE_VIDEOS).inc()
        if _LogAliases.logged < ALIASES_LOGGED:
            _LogAliases.logged += 1
            _LOG.info("skipped %r: its frames are those of %r%s", video.video_id, kept,
                      "" if _LogAliases.logged < ALIASES_LOGGED else " (no more such lines)")
        yield video.video_id


class FindDuplicates(beam.PTransform):
    """(VideoCounts, Abandoned, bad frame rows) -> `Duplicates`. `known`: a PCollection of
    (digest, video id), each video the dataset an --append adds to has (None: a new
    dataset)."""

    def __init__(self, config: CutConfig, known: Optional[beam.PCollection] = None):
        super().__init__()
        self._config, self._known = config, known

    @beam.typehints.no_annotations   # a tuple of PCollections: mypy's, not Beam's
    def expand(self, inputs) -> Duplicates:
        videos, abandoned, bad_frames = inputs
        config, known = self._config, self._known
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
        by_digest = {"new": parted.unique | "ByDigest" >> beam.Map(lambda v: (v.digest, v))}
        if known is not None:
            by_digest["known"] = known
        by_content = (
            by_digest
            | "GroupByDigest" >> beam.CoGroupByKey()
            | "KeepOne" >> beam.FlatMap(_keep_one).with_outputs(_ALIASES, main="unique"))
        aliases = by_content[_ALIASES]
        failures = (copies
                    | "KeyCopies" >> beam.Map(lambda v: (v.video_id, v))
                    | "GroupCopies" >> beam.GroupByKey()
                    | "CopyFailures" >> beam.FlatMap(
                        lambda group, times: copy_failures(group[0], group[1],
                                                           times[group[0]]),
                        beam.pvalue.AsDict(repeated)))
        dropped = (
            (copies | "KeysOfCopies" >> beam.Map(_keys, config).with_output_types(_KEY_ROWS),
             aliases | "KeysOfAliases" >> beam.Map(
                 lambda a: _keys(a[0], config)).with_output_types(_KEY_ROWS),
             abandoned | "KeysOfAbandoned" >> beam.Map(
                 lambda a: (a.split, a.keys)).with_output_types(_KEY_ROWS))
            | "AllDropped" >> beam.Flatten()
            | "DroppedKeys" >> beam.CombineGlobally(_MergeKeys()).without_defaults()
            .with_output_types(_DROPPED))
        alias_ids = aliases | "LogAliases" >> beam.ParDo(_LogAliases())
        bad_frames = bad_frames | "NotOfAliases" >> beam.Filter(
            lambda row, ids: row["video_id"] not in ids,
            beam.pvalue.AsSingleton(alias_ids | "AliasSet" >> beam.CombineGlobally(
                beam.combiners.ToSetCombineFn()).without_defaults(), default_value=set()))
        return Duplicates(by_content.unique, failures, dropped, alias_ids, bad_frames)
