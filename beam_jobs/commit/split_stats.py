"""The dataset's statistics per split (readers/format/channel_stats.py), combined from the
sums of the frames each video stores (cut/frame_stats.py), with no gather.

A video's sums are left out where the shard writer leaves its windows out: by the key of
its first window among the dropped keys (a copy of a duplicate id, a video whose frames
another has; a video that failed half-way gives none). The rest are added per split by a
CombineFn, exactly and in any order (core/moments.py): a few numbers a channel travel,
never frames. On the local runner each video's sums (four float64 a channel: 6.4 KB at
200) wait in memory once, for the dropped keys, as the videos' own rows do.
"""
from __future__ import annotations

import apache_beam as beam

from beam_jobs.core.moments import ExactMoments, VideoMoments
from beam_jobs.core.records import VideoStats
from readers.format.channel_stats import ChannelStats


class SplitStatsFn(beam.CombineFn):
    """{feature: VideoMoments} of a split's videos -> {feature: ChannelStats}."""

    def create_accumulator(self) -> dict[str, ExactMoments]:
        return {}

    def add_input(self, totals: dict[str, ExactMoments],
                  sums: dict[str, VideoMoments]) -> dict[str, ExactMoments]:
        return self.merge_accumulators([totals, {name: ExactMoments.of(moments)
                                                 for name, moments in sums.items()}])

    def merge_accumulators(self, accumulators) -> dict[str, ExactMoments]:
        merged: dict[str, ExactMoments] = {}
        for totals in accumulators:
            for name, moments in totals.items():
                merged[name] = merged[name].merge(moments) if name in merged else moments
        return merged

    def extract_output(self, totals: dict[str, ExactMoments]) -> dict[str, ChannelStats]:
        return {name: moments.stats() for name, moments in totals.items()}


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
