"""Videos -> keyed window examples, ready for the shuffled shard writer."""
from __future__ import annotations

from typing import Mapping, NamedTuple

import apache_beam as beam
import numpy as np

from beam_jobs import keys, windows
from beam_jobs.sources import Video
from readers import spec as spec_lib

VIDEO_COUNTS = "video_counts"


class KeyedExample(NamedTuple):
    split: str
    key: int          # window_key(seed, video_id, start): the shuffled order of the split
    example: bytes    # a serialized tf.train.Example


class VideoCount(NamedTuple):
    split: str
    windows: int      # 0: the video was too short for one window


class CutWindows(beam.DoFn):
    """A `Video` -> one `KeyedExample` per window; a `VideoCount` to 'video_counts'."""

    def __init__(self, features: list[spec_lib.FeatureSpec], length: int, stride: int,
                 tail: str, splits: Mapping[str, float], seed: int):
        self._features = features
        self._length, self._stride, self._tail = length, stride, tail
        self._splits, self._seed = dict(splits), seed
        self._too_short = beam.metrics.Metrics.counter("make_shards", "videos_too_short")
        self._windows = beam.metrics.Metrics.counter("make_shards", "windows")

    def process(self, video: Video):
        num_frames = video.frames.shape[0]
        split = keys.assign_split(self._seed, video.video_id, self._splits)
        starts = windows.window_starts(num_frames, self._length, self._stride, self._tail)
        video_id = video.video_id.encode("utf-8")
        for start in starts:
            values = {
                "window": windows.cut_window(video.frames, start, self._length),
                "mask": windows.window_mask(num_frames, start, self._length),
                "metadata": video.metadata,
                "video_id": video_id,
                "start": np.int64(start),
            }
            example = spec_lib.encode_example(self._features, values)
            yield KeyedExample(split, keys.window_key(self._seed, video.video_id, start), example)
        if not starts:
            self._too_short.inc()
        self._windows.inc(len(starts))
        yield beam.pvalue.TaggedOutput(VIDEO_COUNTS, VideoCount(split, len(starts)))
