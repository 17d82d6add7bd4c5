"""Videos -> keyed window examples, ready for the shuffled shard writer.

A video is anything with `video_id`, `metadata`, `split` (None: by hash), `source`,
`record_index` and a `frames()` iterator of `Frame`s that raises `BadRecord` when the
video turns out unusable. Latent sequences and decoded pixel videos both fit.
"""
from __future__ import annotations

from typing import Any, Mapping, NamedTuple, Optional

import apache_beam as beam
import numpy as np
from apache_beam.utils import shared

from beam_jobs import keys, windows
from beam_jobs.encode import EncoderSpec, encode_frames, load_encoder
from beam_jobs.video import FAILURES, BadRecord, Frame, failure
from readers import spec as spec_lib

VIDEO_COUNTS = "video_counts"
BAD_FRAMES = "bad_frames"


class KeyedExample(NamedTuple):
    split: str
    key: int          # window_key(seed, video_id, start): the shuffled order of the split
    example: bytes    # a serialized tf.train.Example


class VideoCount(NamedTuple):
    split: str
    windows: int      # 0: the video was too short for one window
    bad_frames: int = 0


class CutWindows(beam.DoFn):
    """A video -> one `KeyedExample` per window, or a failure row if it is unusable.

    Frames stream through `windows.stream_windows` (at most L of them held), but a
    video's examples are emitted only once its last frame is read: a video that fails
    half-way (labels that do not match its frame count, a file that breaks) must not
    leave half its windows in the dataset.
    """

    def __init__(self, features: list[spec_lib.FeatureSpec], length: int, stride: int,
                 tail: str, splits: Mapping[str, float], seed: int,
                 pad_frame: Any = None, encoder: Optional[EncoderSpec] = None):
        self._features = features
        self._names = {f.name for f in features}
        self._encoded = features[0].encoding in spec_lib.IMAGE_ENCODINGS
        self._length, self._stride, self._tail = length, stride, tail
        self._splits, self._seed, self._pad_frame = dict(splits), seed, pad_frame
        self._encoder, self._shared_model = encoder, shared.Shared()
        self._too_short = beam.metrics.Metrics.counter("make_shards", "videos_too_short")
        self._windows = beam.metrics.Metrics.counter("make_shards", "windows")

    def setup(self):
        if self._encoder:  # once per worker process, whatever the number of DoFn copies
            path = self._encoder.path
            self._encode = self._shared_model.acquire(lambda: load_encoder(path), tag=path)

    def process(self, video):
        split = video.split or keys.assign_split(self._seed, video.video_id, self._splits)
        bad_frames = []
        try:
            examples = list(self._examples(video, split, bad_frames))
        except BadRecord as e:
            yield beam.pvalue.TaggedOutput(FAILURES, failure(
                video.source, video.record_index, video.video_id, str(e)))
            return
        yield from examples
        if not examples:
            self._too_short.inc()
        self._windows.inc(len(examples))
        if bad_frames:
            yield beam.pvalue.TaggedOutput(BAD_FRAMES, {
                "video_id": video.video_id, "source": video.source,
                "bad_frames": len(bad_frames), "first": bad_frames[:5]})
        yield beam.pvalue.TaggedOutput(VIDEO_COUNTS,
                                       VideoCount(split, len(examples), len(bad_frames)))

    def _examples(self, video, split: str, bad_frames: list):
        def counted(frames):
            for index, frame in enumerate(frames):
                if not frame.valid:
                    bad_frames.append(index)
                yield frame

        video_id = video.video_id.encode("utf-8")
        frames = counted(video.frames())
        if self._encoder:
            frames = encode_frames(frames, self._encode, self._encoder)
        for start, window in windows.stream_windows(frames, self._length, self._stride,
                                                    self._tail):
            values = self._window_values(window)
            values.update(metadata=video.metadata, video_id=video_id, start=np.int64(start))
            example = spec_lib.encode_example(self._features, values)
            yield KeyedExample(split, keys.window_key(self._seed, video.video_id, start), example)

    def _window_values(self, frames: list[Frame]) -> dict:
        """window, mask and labels of L frames: the given ones, then padding."""
        pad = self._length - len(frames)
        data = [f.data for f in frames]
        pad_frame = np.zeros_like(data[0]) if self._pad_frame is None else self._pad_frame
        data += [pad_frame] * pad
        values = {"window": data if self._encoded else np.stack(data),
                  "mask": np.array([f.valid for f in frames] + [False] * pad, np.float32)}
        if "labels" in self._names:
            zero = np.zeros_like(frames[0].label)
            values["labels"] = np.stack([f.label for f in frames] + [zero] * pad)
        return values
