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

from beam_jobs import keys, progress, windows
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
    frames: int = 0


class CutWindows(beam.DoFn):
    """A video -> one `KeyedExample` per window, or a failure row if it is unusable.

    Frames stream through `windows.stream_windows` (at most L of them held), but a
    video's examples are emitted only once its last frame is read: a video that fails
    half-way (labels that do not match its frame count, a file that breaks) must not
    leave half its windows in the dataset.
    """

    def __init__(self, features: list[spec_lib.FeatureSpec], length: int, stride: int,
                 tail: str, splits: Mapping[str, float], seed: int,
                 pad_frame: Any = None, encoder: Optional[EncoderSpec] = None,
                 total_videos: Optional[int] = None, workers: int = 1,
                 progress_interval: float = 10.0):
        self._features = features
        self._names = {f.name for f in features}
        self._encoded = features[0].encoding in spec_lib.IMAGE_ENCODINGS
        self._length, self._stride, self._tail = length, stride, tail
        self._splits, self._seed, self._pad_frame = dict(splits), seed, pad_frame
        self._encoder, self._shared_model = encoder, shared.Shared()
        self._progress_args = (total_videos, workers, progress_interval)
        self._counters = {name: progress.counter(name) for name in
                          ("videos_too_short", "windows", "frames", "bad_frames")}

    def setup(self):
        self._progress = progress.Progress(*self._progress_args)
        if self._encoder:  # once per worker process, whatever the number of DoFn copies
            path = self._encoder.path
            self._encode = self._shared_model.acquire(lambda: load_encoder(path), tag=path)

    def finish_bundle(self):
        self._progress.log()

    def process(self, video):
        self._progress.start()
        split = video.split or keys.assign_split(self._seed, video.video_id, self._splits)
        try:
            examples, frames, bad_frames = self._cut(video, split)
        except BadRecord as e:
            self._progress.add(failures=1)
            yield beam.pvalue.TaggedOutput(FAILURES, failure(
                video.source, video.record_index, video.video_id, str(e)))
            return
        yield from examples
        self._progress.add(videos=1, frames=frames, windows=len(examples))
        for name, value in (("videos_too_short", not examples), ("windows", len(examples)),
                            ("frames", frames), ("bad_frames", len(bad_frames))):
            self._counters[name].inc(int(value))
        if bad_frames:
            yield beam.pvalue.TaggedOutput(BAD_FRAMES, {
                "video_id": video.video_id, "source": video.source,
                "bad_frames": len(bad_frames), "first": bad_frames[:5]})
        yield beam.pvalue.TaggedOutput(VIDEO_COUNTS, VideoCount(
            split, len(examples), len(bad_frames), frames))

    def _cut(self, video, split: str) -> tuple[list[KeyedExample], int, list[int]]:
        """All the video's examples, its frame count, and the indices of its bad frames."""
        count, bad = 0, []

        def counted(frames):
            nonlocal count
            for count, frame in enumerate(frames, start=1):
                if not frame.valid:
                    bad.append(count - 1)
                yield frame

        frames = counted(video.frames())
        if self._encoder:
            frames = encode_frames(frames, self._encode, self._encoder)
        video_id = video.video_id.encode("utf-8")
        examples = []
        for start, window in windows.stream_windows(frames, self._length, self._stride,
                                                    self._tail):
            values = self._window_values(window)
            values.update(metadata=video.metadata, video_id=video_id, start=np.int64(start))
            examples.append(KeyedExample(
                split, keys.window_key(self._seed, video.video_id, start),
                spec_lib.encode_example(self._features, values)))
        return examples, count, bad

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
