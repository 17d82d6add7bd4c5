"""Videos whose id comes more than once: no copy of them is used.

Two videos with one id would share window keys and a split, and a reader could not tell
them apart, so every copy is a failure. Duplicates are only known once every video is
cut, which is after their windows entered the shuffle: their keys are handed to the
shard writer as a side input (`DroppedKeys`), which leaves those windows out, and the
last step reports each copy as a failure (`set_aside`).
"""
from __future__ import annotations

import collections

import apache_beam as beam

from beam_jobs.cut import VideoCount, WindowConfig
from beam_jobs.sources.base import failure


def duplicate_videos(videos: list[VideoCount]) -> list[VideoCount]:
    """The videos whose id came more than once, every copy of them."""
    seen = collections.Counter(v.video_id for v in videos)
    return [v for v in videos if seen[v.video_id] > 1]


def dropped_keys(duplicates: list[VideoCount], config: WindowConfig
                 ) -> dict[str, frozenset[int]]:
    """Per split, the keys of the windows of duplicated videos: they are cut like any
    video's (so the shuffle holds them), and left out when the shards are written."""
    keys_by_split: dict[str, set[int]] = {}
    for count in duplicates:
        keys_by_split.setdefault(count.split, set()).update(
            config.key(count.video_id, start) for start in config.starts(count.frames))
    return {split: frozenset(k) for split, k in keys_by_split.items()}


class DroppedKeys(beam.PTransform):
    """The list of every video's `VideoCount` -> one dict, per split, of the window keys
    that the shard writer must leave out (a singleton side input)."""

    def __init__(self, config: WindowConfig):
        super().__init__()
        self._config = config

    def expand(self, video_lists):
        config = self._config
        return video_lists | "KeysOfDuplicates" >> beam.Map(
            lambda videos: dropped_keys(duplicate_videos(videos), config))


def set_aside(videos: list[VideoCount]) -> tuple[list[VideoCount], list[dict]]:
    """(the videos whose id came once, one failure row per copy of every other)."""
    duplicates = duplicate_videos(videos)
    duplicated = {v.video_id for v in duplicates}
    return [v for v in videos if v.video_id not in duplicated], _failures(duplicates)


def _failures(duplicates: list[VideoCount]) -> list[dict]:
    """One failure row per occurrence of a video id that came more than once."""
    by_id = collections.defaultdict(list)
    for count in duplicates:
        by_id[count.video_id].append(count)
    rows = []
    for video_id, counts in by_id.items():
        where = "; ".join(f"{c.source}" + ("" if c.record_index is None else
                                           f" #{c.record_index}") for c in counts[:4])
        for c in counts:
            rows.append(failure(c.source, c.record_index, video_id,
                                f"the video id appears {len(counts)} times ({where}): "
                                "no copy is used"))
    return rows
