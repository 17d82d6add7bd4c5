"""The dataset's statistics per split (readers/format/channel_stats.py), combined from the
sums of the frames each video stores (readers/format/frame_stats.py), with no gather.

A video's sums are left out where the shard writer leaves its windows out: by the key of
its first window among the dropped keys (a copy of a duplicate id, a video whose frames
another has; a video that failed half-way gives none). The rest are added per split by a
CombineFn, exactly and in any order (readers/format/moments.py), 256 videos at a time in one
vectorised pass: a few numbers a channel travel, never frames. On the local runner each
video's sums (four float64 a channel: 6.4 KB at 200) wait in memory once, for the
dropped keys, as the videos' own rows do.
"""
from __future__ import annotations

from typing import Optional

import apache_beam as beam

from beam_jobs.core.records import VideoStats
from readers.format.channel_stats import ChannelStats
from readers.format.moments import ExactMoments, VideoMoments


class _Sums:
    """A feature's sums in an accumulator: those added exactly, and videos' waiting to
    be, up to a batch (`ExactMoments.of_videos` adds a batch in one vectorised pass)."""

    def __init__(self, added: Optional[ExactMoments] = None):
        self.added = added
        self.waiting: list[VideoMoments] = []

    def add(self, video: VideoMoments) -> None:
        self.waiting.append(video)
        if len(self.waiting) >= _BATCH:
            self.fold()

    def exact(self) -> ExactMoments:
        """All of its sums added, itself unchanged."""
        if not self.waiting:
            assert self.added is not None   # made with one or given one
            return self.added
        batch = ExactMoments.of_videos(self.waiting)
        return batch if self.added is None else self.added.merge(batch)

    def fold(self) -> ExactMoments:
        """The waiting videos added, here."""
        self.added, self.waiting = self.exact(), []
        return self.added


_BATCH = 256   # videos' sums waiting at most, per feature: 256 x 6.4 KB at 200 channels


class SplitStatsFn(beam.CombineFn):
    """{feature: VideoMoments} of a split's videos -> {feature: ChannelStats}."""

    def create_accumulator(self) -> dict[str, _Sums]:
        return {}

    def add_input(self, totals: dict[str, _Sums],
                  sums: dict[str, VideoMoments]) -> dict[str, _Sums]:
        for name, moments in sums.items():
            totals.setdefault(name, _Sums()).add(moments)
        return totals

    def merge_accumulators(self, accumulators) -> dict[str, _Sums]:
        """A new accumulator: those given are left as they are, as Beam asks."""
        merged: dict[str, _Sums] = {}
        for totals in accumulators:
            for name, sums in totals.items():
                exact = sums.exact()
                merged[name] = _Sums(merged[name].exact().merge(exact) if name in merged
                                     else exact)
        return merged

    def compact(self, totals: dict[str, _Sums]) -> dict[str, _Sums]:
        """Before an accumulator travels: its waiting videos added (a few numbers a
        channel travel, never a batch of videos' sums)."""
        for sums in totals.values():
            sums.fold()
        return totals

    def extract_output(self, totals: dict[str, _Sums]) -> dict[str, ChannelStats]:
        return {name: sums.fold().stats() for name, sums in totals.items()}


def _kept(row: VideoStats, dropped: dict) -> bool:
    return row.key not in dropped.get(row.split, ())


class SplitStats(beam.PTransform):
    """(VideoStats of the videos, the dropped keys: one {split: keys} element) ->
    (split, {feature: ChannelStats}) of the videos whose windows the shards hold."""

    def expand(self, inputs):
        rows, dropped = inputs
        return (rows
                | "Kept" >> beam.Filter(_kept, beam.pvalue.AsSingleton(dropped,
                                                                       default_value={}))
                | "BySplit" >> beam.Map(lambda row: (row.split, row.sums))
                | "Combine" >> beam.CombinePerKey(SplitStatsFn()))
