"""Latent sources: one `LatentVideo` per record, or one failure row when it cannot be read.

Latent sequences come from TFRecord files of `tf.train.Example`s, one video a record:
the sequence is a `tf.io.serialize_tensor` of a float tensor [T, ...] in a bytes feature
(the first user story's format), or a FloatList with the trailing dims given separately.
"""
from __future__ import annotations

import dataclasses
import math
import os
from typing import Iterator, NamedTuple, Optional

import apache_beam as beam
import numpy as np
import tensorflow as tf
from tensorflow.core.example import example_pb2
from tensorflow.core.framework import tensor_pb2

from beam_jobs.tfrecord_files import read_tfrecords
from beam_jobs.video import FAILURES, BadRecord, Frame, failure


class LatentVideo(NamedTuple):
    """One latent sequence; a video for `examples.CutWindows`."""
    video_id: str
    sequence: np.ndarray               # [T, ...]
    metadata: Optional[np.ndarray]     # [K] float32
    source: str = ""
    record_index: Optional[int] = None
    split: Optional[str] = None        # by hash of the id

    def frames(self) -> Iterator[Frame]:
        return (Frame(row) for row in self.sequence)


@dataclasses.dataclass(frozen=True)
class LatentFormat:
    """How to read latent records, and what every video of the dataset must look like."""
    sequence_feature: str = "frames"
    metadata_feature: str = "recipe"
    id_feature: Optional[str] = None
    sequence_shape: Optional[tuple[int, ...]] = None   # trailing dims of a FloatList sequence
    frame_shape: Optional[tuple[int, ...]] = None      # fixed by the probe
    dtype: Optional[str] = None                        # fixed by the probe
    metadata_length: Optional[int] = None              # fixed by the probe; 0: none

    def parse(self, record: bytes, source: str, index: int) -> LatentVideo:
        """Parse one record; raise BadRecord with the reason when it does not fit."""
        try:
            example = example_pb2.Example.FromString(record)
        except Exception as e:  # protobuf's DecodeError and friends
            raise BadRecord(f"not a tf.train.Example: {e}") from None
        features = example.features.feature
        video_id = self._video_id(features, source, index)
        try:
            frames = self._frames(features)
            metadata = self._metadata(features)
        except BadRecord as e:
            raise BadRecord(str(e), video_id) from None
        return LatentVideo(video_id, frames, metadata, source, index)

    def _video_id(self, features, source: str, index: int) -> str:
        if self.id_feature is None:
            return f"{os.path.basename(source)}:{index}"
        values = _values(features, self.id_feature, "bytes_list")
        if len(values) != 1:
            raise BadRecord(f"id feature {self.id_feature!r} holds {len(values)} values, not 1")
        return values[0].decode("utf-8", errors="replace")

    def _frames(self, features) -> np.ndarray:
        name = self.sequence_feature
        if name not in features:
            raise BadRecord(f"no sequence feature {name!r}")
        kind = features[name].WhichOneof("kind")
        if kind == "bytes_list":
            values = features[name].bytes_list.value
            if len(values) != 1:
                raise BadRecord(f"sequence feature {name!r} holds {len(values)} byte strings, "
                                "not one serialized tensor")
            try:
                frames = tf.make_ndarray(tensor_pb2.TensorProto.FromString(values[0]))
            except Exception as e:
                raise BadRecord(f"sequence feature {name!r} is not a serialized tensor: {e}") from None
        elif kind == "float_list":
            if self.sequence_shape is None:
                raise BadRecord(f"sequence feature {name!r} is a FloatList; pass "
                                "--sequence_shape with the dims of one frame")
            frames = np.asarray(features[name].float_list.value, dtype=np.float32)
            per_frame = math.prod(self.sequence_shape)
            if per_frame == 0 or frames.size % per_frame:
                raise BadRecord(f"sequence feature {name!r} has {frames.size} floats, not a "
                                f"multiple of --sequence_shape {list(self.sequence_shape)}")
            frames = frames.reshape(-1, *self.sequence_shape)
        else:
            raise BadRecord(f"sequence feature {name!r} holds {kind or 'nothing'}, not float latents")
        if frames.dtype.kind != "f":
            raise BadRecord(f"sequence {name!r} is {frames.dtype}, not a float tensor")
        if frames.ndim < 1:
            raise BadRecord(f"sequence {name!r} is a scalar, not a sequence [T, ...]")
        if self.sequence_shape is not None and frames.shape[1:] != self.sequence_shape:
            raise BadRecord(f"frames have shape {list(frames.shape[1:])}, not --sequence_shape "
                            f"{list(self.sequence_shape)}")
        if self.frame_shape is not None and (frames.shape[1:] != self.frame_shape
                                             or frames.dtype.name != self.dtype):
            raise BadRecord(
                f"sequence is {frames.dtype.name} [T, {', '.join(map(str, frames.shape[1:]))}], "
                f"the dataset's is {self.dtype} [T, {', '.join(map(str, self.frame_shape))}] "
                "(set by the first readable record)")
        return frames

    def _metadata(self, features) -> Optional[np.ndarray]:
        name = self.metadata_feature
        if name not in features:
            if self.metadata_length:
                raise BadRecord(f"no metadata feature {name!r}")
            return None
        values = np.asarray(_values(features, name, "float_list"), dtype=np.float32)
        if self.metadata_length is not None and values.size != self.metadata_length:
            raise BadRecord(f"metadata {name!r} has {values.size} values, expected "
                            f"{self.metadata_length}")
        return values

    def fixed_by(self, video: LatentVideo) -> "LatentFormat":
        """This format, with shapes and dtype pinned to those of `video`."""
        return dataclasses.replace(
            self, frame_shape=tuple(video.sequence.shape[1:]), dtype=video.sequence.dtype.name,
            metadata_length=0 if video.metadata is None else int(video.metadata.size))


def _values(features, name: str, kind: str):
    actual = features[name].WhichOneof("kind")
    if actual != kind:
        raise BadRecord(f"feature {name!r} holds {actual or 'nothing'}, expected {kind}")
    return getattr(features[name], kind).value


def probe_latent_format(paths: list[str], fmt: LatentFormat,
                        max_records: int = 100) -> LatentFormat:
    """Pin the frame shape, dtype and metadata length to the first readable record.

    Raises BadRecord naming the last reason when none of the first `max_records`
    records of the inputs can be read.
    """
    reason, seen = "no records", 0
    for path in paths:
        for index, record in read_tfrecords(path):
            if isinstance(record, ValueError):
                reason = f"{path}: {record}"
                break
            try:
                return fmt.fixed_by(fmt.parse(record, path, index))
            except BadRecord as e:
                reason = f"{path} record {index}: {e}"
            seen += 1
            if seen >= max_records:
                raise BadRecord(f"none of the first {seen} records can be read; last: {reason}")
    raise BadRecord(f"no readable record in the input ({reason})")


class ReadLatentRecords(beam.DoFn):
    """A TFRecord file path -> a `LatentVideo` per record; failures to 'failures'."""

    def __init__(self, fmt: LatentFormat):
        self._fmt = fmt

    def process(self, path: str):
        for index, record in read_tfrecords(path):
            if isinstance(record, ValueError):
                yield beam.pvalue.TaggedOutput(FAILURES, failure(path, index, None, str(record)))
                return
            try:
                yield self._fmt.parse(record, path, index)
            except BadRecord as e:
                yield beam.pvalue.TaggedOutput(FAILURES, failure(path, index, e.video_id, str(e)))
