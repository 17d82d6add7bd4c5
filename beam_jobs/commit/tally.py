"""What the commit needs of a run, in one combine: per split the videos, windows, frames
and bad frames of the videos that gave no failure, the encoder devices that cut them, the
longest video, the failed records, the videos an --append skipped, the video ids the
new videos.jsonl would list twice, and the shards written (a small row each)."""
from __future__ import annotations

from typing import NamedTuple

import apache_beam as beam

from beam_jobs.commit.decide import Counts
from beam_jobs.core.records import SplitShard, VideoCount

SPLIT_COUNTS = ("videos", "windows", "skipped_short", "frames", "bad_frames")


class Tally(NamedTuple):
    """What finalize knows of the run: per split {"videos", "windows", "skipped_short",
    "frames", "bad_frames"} (SplitInfo's counts) of the videos that gave no failure, the
    sorted encoder devices that cut them, the shards written (sorted), the longest
    video's frames, the failed input records or videos, the videos an --append skipped,
    the video ids the new videos.jsonl would list more than once, and the failed records
    of earlier runs it keeps (commit/failures.py)."""
    counts: dict
    devices: list[str]   # each once; sorted by extract_output
    shards: list
    longest: int = 0
    failed: int = 0
    skipped: int = 0
    twice: int = 0
    remembered: int = 0

    def total(self, name: str) -> int:
        """A count (one of SPLIT_COUNTS) summed over the splits."""
        return sum(row[name] for row in self.counts.values())

    def decision_counts(self) -> Counts:
        return Counts(self.total("videos") + self.total("skipped_short"), self.failed,
                      self.total("windows"), self.longest, self.twice)


def empty_counts() -> dict:
    return dict.fromkeys(SPLIT_COUNTS, 0)


# Rows of the combine: (kind, value).
VIDEO, SHARD, FAILED, SKIPPED, TWICE = "video", "shard", "failed", "skipped", "twice"
REMEMBERED = "remembered"
_SUMMED = {FAILED: "failed", SKIPPED: "skipped", TWICE: "twice", REMEMBERED: "remembered"}


class TallyFn(beam.CombineFn):
    """(kind, value) rows -> a Tally: (VIDEO, VideoCount), (SHARD, SplitShard),
    (FAILED, records), (SKIPPED, 1), (TWICE, 1), (REMEMBERED, records). One step for
    every count and the shards, where a combine each would cost the job a fixed time
    each to build and run."""

    def create_accumulator(self) -> Tally:
        return Tally({}, [], [])

    def add_input(self, tally: Tally, row) -> Tally:
        kind, value = row
        if kind == SHARD:
            shard: SplitShard = value
            tally.shards.append(shard)
            return tally
        if kind != VIDEO:
            return tally._replace(**{_SUMMED[kind]: getattr(tally, _SUMMED[kind]) + value})
        video: VideoCount = value
        counts = tally.counts.setdefault(video.split, empty_counts())
        counts["videos" if video.windows else "skipped_short"] += 1
        counts["windows"] += video.windows
        counts["bad_frames"] += video.bad_frames
        counts["frames"] += video.frames
        if video.encoder_device and video.encoder_device not in tally.devices:
            tally.devices.append(video.encoder_device)
        return tally._replace(longest=max(tally.longest, video.frames))

    def merge_accumulators(self, tallies) -> Tally:
        merged = self.create_accumulator()
        for tally in tallies:
            for split, counts in tally.counts.items():
                into = merged.counts.setdefault(split, empty_counts())
                for name, value in counts.items():
                    into[name] += value
            merged.devices.extend(d for d in tally.devices if d not in merged.devices)
            merged.shards.extend(tally.shards)
            merged = merged._replace(longest=max(merged.longest, tally.longest), **{
                name: getattr(merged, name) + getattr(tally, name)
                for name in _SUMMED.values()})
        return merged

    def extract_output(self, tally: Tally) -> Tally:
        return tally._replace(devices=sorted(tally.devices), shards=sorted(tally.shards))
