"""Latent sources: one `LatentVideo` per record, or one failure row when it cannot be read.

Latent sequences come from TFRecord files of `tf.train.Example`s, one video a record:
the sequence is a `tf.io.serialize_tensor` of a float tensor [T, ...] in a bytes feature
(serialized-tensor records, docs/format.md; float16, bfloat16, float32 and float64 are
kept), or a
FloatList with the trailing dims given separately.
"""
from __future__ import annotations

import dataclasses
import functools
import math
import os
from typing import Iterator, NamedTuple, Optional, Sequence, Union, cast

import apache_beam as beam
import numpy as np

from beam_jobs.core import ids, paths
from beam_jobs.core.configs import JobConfig
from beam_jobs.core.frames import BadRecord, Frame, check_finite
from beam_jobs.core.records import FAILURES, failure
from beam_jobs.sources import tensor_proto
from beam_jobs.sources.base import SKIPPED, JoinKnown, Source
from beam_jobs.sources.tfrecords import PagedRecord, Skipped, read_records
from readers import format as data_format
from readers.format import video_rows, wire
from readers.format.tfrecord import Lost

FLOAT_DTYPES = ("float16", "bfloat16", "float32", "float64")


class LatentVideo(NamedTuple):
    """One latent sequence; a video for `cut.CutWindows`."""
    video_id: str
    sequence: np.ndarray               # [T, ...]
    metadata: Optional[np.ndarray]     # [K] float32
    source: str = ""
    record_index: Optional[int] = None
    split: Optional[str] = None        # by hash of the id

    def frames(self, info: Optional[dict] = None) -> Iterator[Frame]:
        return (Frame(row) for row in self.sequence)


@dataclasses.dataclass(frozen=True)
class LatentParser:
    """How to read latent records, and what every video of the dataset must look like."""
    sequence_feature: str = "frames"
    metadata_feature: str = "recipe"                   # "": no metadata
    id_feature: Optional[str] = None
    sequence_shape: Optional[tuple[int, ...]] = None   # trailing dims of a FloatList sequence
    root: str = ""                                     # ids are file paths relative to it
    allow_nonfinite: bool = False
    frame_shape: Optional[tuple[int, ...]] = None      # fixed by the probe
    dtype: Optional[str] = None                        # fixed by the probe
    metadata_length: Optional[int] = None              # fixed by the probe; 0: none
    record_bytes: int = 0                              # a typical record, from the probe

    def parse(self, record: bytes, source: str, index: int) -> LatentVideo:
        """Parse one record; raise BadRecord with the reason when it does not fit. The
        Example and the serialized tensor are read by hand (readers.format), so the job
        never imports TensorFlow; the frames are a read-only view of `record`."""
        try:
            lists = wire.feature_lists(record)
        except ValueError as e:
            raise BadRecord(str(e)) from None
        features = _Features(record, lists)
        video_id = self._video_id(features, source, index)
        try:
            frames = self._frames(features)
            metadata = self._metadata(features)
            if not self.allow_nonfinite:
                check_finite(frames, "latents")
                if metadata is not None:
                    check_finite(metadata, "metadata")
        except BadRecord as e:
            raise BadRecord(str(e), video_id) from None
        return LatentVideo(video_id, frames, metadata, source, index)

    def video_id_of(self, record: Union[bytes, PagedRecord], source: str, index: int) -> str:
        """The id of record `index` of file `source`, read from the record (bytes, or a
        PagedRecord: only its id feature's pages are read) when the ids are a feature;
        ValueError when it has no valid one."""
        if self.id_feature is None:
            return self._video_id(None, source, index)
        buffer = cast(wire.Buffer, record)   # a PagedRecord reads as bytes do: len, [i], [a:b]
        return self._video_id(_Features(buffer, wire.feature_lists(buffer)), source, index)

    def _video_id(self, features, source: str, index: int) -> str:
        if self.id_feature is None:
            return f"{paths.default_id(source, self.root, strip_suffix=False)}:{index}"
        values = features.values(self.id_feature, "bytes")
        if len(values) != 1:
            raise BadRecord(f"id feature {self.id_feature!r} holds {len(values)} values, not 1")
        try:
            return ids.video_id(values[0].decode("utf-8"))
        except UnicodeDecodeError:
            raise BadRecord(f"id feature {self.id_feature!r} is not UTF-8 text") from None

    def _frames(self, features) -> np.ndarray:
        name = self.sequence_feature
        if name not in features.lists:
            raise BadRecord(f"no sequence feature {name!r}")
        kind = features.lists[name][0]
        if kind == "bytes":
            frames = _tensor_frames(features, name)
        elif kind == "float":
            frames = self._float_frames(features, name)
        else:
            raise BadRecord(f"sequence feature {name!r} holds {_kind(kind)}, not float latents")
        self._check_frames(frames, name)
        return frames

    def _float_frames(self, features, name: str) -> np.ndarray:
        """The frames of a FloatList sequence, shaped by --sequence_shape; BadRecord
        without it, or for a count of floats that is no whole number of frames."""
        if self.sequence_shape is None:
            raise BadRecord(f"sequence feature {name!r} is a FloatList; pass "
                            "--sequence_shape with the dims of one frame")
        frames = features.floats(name)
        per_frame = math.prod(self.sequence_shape)
        if per_frame == 0 or frames.size % per_frame:
            raise BadRecord(f"sequence feature {name!r} has {frames.size} floats, not a "
                            f"multiple of --sequence_shape {list(self.sequence_shape)}")
        return frames.reshape(-1, *self.sequence_shape)

    def _check_frames(self, frames: np.ndarray, name: str) -> None:
        """BadRecord for frames that are no float sequence [T, ...], or not of
        --sequence_shape, or not the shape and dtype the first readable record set."""
        if frames.dtype.name not in FLOAT_DTYPES:
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

    def _metadata(self, features) -> Optional[np.ndarray]:
        name = self.metadata_feature
        if not name:
            return None
        if self.metadata_length == 0:
            if name in features.lists:
                raise BadRecord(f"has metadata {name!r}, but the dataset has none (none of "
                                "the first records had it)")
            return None
        if name not in features.lists:
            if self.metadata_length:
                raise BadRecord(f"no metadata feature {name!r} (other records have it)")
            return None
        values = features.floats(name)
        try:
            video_rows.check_metadata(values.size, f"metadata {name!r}")
        except video_rows.RowError as e:
            raise BadRecord(str(e)) from None
        if self.metadata_length is not None and values.size != self.metadata_length:
            raise BadRecord(f"metadata {name!r} has {values.size} values, expected "
                            f"{self.metadata_length}")
        return values


class _Features(NamedTuple):
    """An Example's features as `wire.feature_lists` finds them in its record."""
    record: wire.Buffer
    lists: dict[str, wire.ListSpan]

    def _list(self, name: str, kind: str) -> tuple[int, int]:
        actual, first, last = self.lists.get(name, ("", 0, 0))
        if actual != kind:
            raise BadRecord(f"feature {name!r} holds {_kind(actual)}, expected {kind}_list")
        return first, last

    def values(self, name: str, kind: str) -> list:
        """The values of a feature's list, which must be of this kind."""
        try:
            return wire.list_values(kind, self.record, *self._list(name, kind))
        except (ValueError, IndexError):
            raise BadRecord(f"feature {name!r}: its {kind}_list is not well formed") from None

    def floats(self, name: str) -> np.ndarray:
        values = self.values(name, "float")
        return np.concatenate(values) if values else np.zeros(0, np.float32)

    def spans(self, name: str) -> list[tuple[int, int]]:
        """[first, last) in the record of each byte string of a BytesList feature."""
        first, last = self._list(name, "bytes")
        try:
            return [(a, b) for number, _, a, b in wire.message_fields(
                self.record, first, last, "a BytesList") if number == 1]
        except (ValueError, IndexError):
            raise BadRecord(f"feature {name!r}: its bytes_list is not well formed") from None


def _tensor_frames(features: _Features, name: str) -> np.ndarray:
    """The frames of a BytesList sequence: one serialized tensor; BadRecord for more
    byte strings, or one that is no tensor."""
    spans = features.spans(name)
    if len(spans) != 1:
        raise BadRecord(f"sequence feature {name!r} holds {len(spans)} byte strings, "
                        "not one serialized tensor")
    try:
        return tensor_proto.parse_tensor(features.record, *spans[0])
    except ValueError as e:
        raise BadRecord(
            f"sequence feature {name!r} is not a serialized tensor: {e}") from None


def _kind(kind: str) -> str:
    return f"{kind}_list" if kind else "nothing"


def probe_latent_format(files: Sequence[tuple[str, int]], fmt: LatentParser,
                        max_records: int = 100) -> LatentParser:
    """Pin the frame shape and dtype to the first readable record, and decide from the
    first `max_records` records whether the dataset has metadata: it has when any of
    them has the metadata feature (its length is that of the first), and then a record
    without it is a failure.

    Raises BadRecord naming the last reason when none of them can be read.
    """
    reason, seen, first, metadata_length = "no records", 0, None, 0
    for path, index, record in _records_in_turn(files):
        if isinstance(record, Lost):
            reason = f"{path}: {record.reason}"
            continue
        seen += 1
        try:
            video = fmt.parse(record, path, index)
        except BadRecord as e:
            reason = f"{path} record {index}: {e}"
        else:
            if first is None:
                first = dataclasses.replace(
                    fmt, frame_shape=tuple(video.sequence.shape[1:]),
                    dtype=video.sequence.dtype.name, record_bytes=len(record))
            if video.metadata is not None and not metadata_length:
                metadata_length = int(video.metadata.size)
        if seen >= max_records:
            break
    if first is None:
        raise _none_readable_error(seen, reason)
    return dataclasses.replace(first, metadata_length=metadata_length)


def _none_readable_error(seen: int, reason: str) -> BadRecord:
    """The error of a probe that read `seen` records and parsed none, `reason` the last
    reason why."""
    return BadRecord(f"none of the first {seen} records can be read; last: {reason}"
                     if seen else f"no readable record in the input ({reason})")


def _records_in_turn(files: Sequence[tuple[str, int]]
                     ) -> Iterator[tuple[str, int, Union[bytes, Lost]]]:
    """(path, index, record or Lost) of each record of `files` in turn, read as it is
    asked for; a broken frame ends its file (the next one is read)."""
    for path, size in files:
        for index, record in read_records(path, size):
            if isinstance(record, Skipped):   # none is: no ids to skip were given
                continue
            yield path, index, record
            if isinstance(record, Lost) and record.framing:
                break


class ReadLatentRecords(beam.DoFn):
    """A (path, size) of a TFRecord file, or (path, size, {index: id}) of the records an
    --append skips -> a `LatentVideo` per record; failures to 'failures', one row per bad
    record and one for a lost rest of a file; the skipped records' ids to SKIPPED, the
    records unread (`tfrecords.read_records`). The path comes as bytes (os.fsencode):
    Beam's coders take only valid UTF-8 text, and a file's name need not be."""

    def __init__(self, fmt: LatentParser):
        self._fmt = fmt

    def process(self, file: tuple):
        path, size = os.fsdecode(file[0]), file[1]
        known = file[2] if len(file) > 2 else {}
        for index, record in read_records(path, size, self._fmt.record_bytes,
                                          (lambda i, _: known.get(i)) if known else None):
            if isinstance(record, Skipped):
                yield beam.pvalue.TaggedOutput(SKIPPED, record.video_id)
                continue
            if isinstance(record, Lost):
                yield beam.pvalue.TaggedOutput(FAILURES, failure(
                    path, index, None, record.reason, record.records))
                continue
            try:
                yield self._fmt.parse(record, path, index)
            except BadRecord as e:
                yield beam.pvalue.TaggedOutput(FAILURES, failure(path, index, e.video_id, str(e)))


class ReadRecordIds(beam.DoFn):
    """A (path, size) of a TFRecord file -> (video id, (path, index)) per record whose id
    can be read; of each record only its id is read (in an uncompressed file). A record
    without a readable id is left to ReadLatentRecords, where it fails."""

    def __init__(self, fmt: LatentParser):
        self._fmt = fmt

    def process(self, file: tuple[bytes, int]):
        path = os.fsdecode(file[0])
        for index, record in read_records(path, file[1], self._fmt.record_bytes,
                                          lambda i, rec: self._fmt.video_id_of(rec, path, i)):
            if isinstance(record, Skipped):
                yield record.video_id, (file[0], index)


class ReadLatents(beam.PTransform):
    """The pipeline -> (a `LatentVideo` per record of the files, failure rows, the ids
    skipped). With `known` (a PCollection of the ids to skip), the files' ids are read
    first and joined with them (JoinKnown), then each file is read with the indexes of
    its known records, which it seeks past."""

    def __init__(self, files: tuple[tuple[str, int], ...], fmt: LatentParser,
                 known: Optional[beam.PCollection] = None):
        super().__init__()
        self._files, self._fmt, self._known = files, fmt, known

    def expand(self, pipeline):
        files = pipeline | "ListInputs" >> beam.Create([(os.fsencode(path), size)
                                                        for path, size in self._files])
        if self._known is not None:
            known = (files | "RecordIds" >> beam.ParDo(ReadRecordIds(self._fmt))
                     | "SkipKnown" >> JoinKnown(self._known)).known
            by_file = known | "ByFile" >> beam.Map(
                lambda pair: (pair[1][0], (pair[1][1], pair[0])))
            files = ({"size": files, "known": by_file} | "JoinFiles" >> beam.CoGroupByKey()
                     | "WithKnown" >> beam.FlatMap(
                         lambda kv: [(kv[0], size, dict(kv[1]["known"]))
                                     for size in kv[1]["size"]]))
        videos = files | "ReadLatents" >> beam.ParDo(ReadLatentRecords(self._fmt)).with_outputs(
            FAILURES, SKIPPED, main="videos")
        return videos.videos, videos[FAILURES], videos[SKIPPED]


def build_source(config: JobConfig) -> Source:
    """Latent TFRecords: the frame shape, dtype and metadata length are those of the
    first records (probe_latent_format)."""
    flags = config.latents
    fmt = probe_latent_format(config.inputs.files, LatentParser(
        flags.sequence_feature, flags.metadata_feature, flags.id_feature,
        flags.sequence_shape, root=config.inputs.root,
        allow_nonfinite=config.io.allow_nonfinite))
    # the probe fixed them (or raised)
    assert (fmt.frame_shape is not None and fmt.dtype is not None
            and fmt.metadata_length is not None)
    window = data_format.FeatureSpec.for_array(
        "window", (config.windows.window, *fmt.frame_shape), fmt.dtype)
    stored_bytes = sum(size * (4 if path.endswith(".gz") else 1)
                       for path, size in config.inputs.files)
    # Parsing records is numpy and protobuf work in Python, which needs processes.
    return Source(data_format.window_features(window, fmt.metadata_length),
                  functools.partial(ReadLatents, config.inputs.files, fmt), stored_bytes,
                  "multi_processing",
                  frame={"kind": "latents", "shape": list(fmt.frame_shape),
                         "dtype": fmt.dtype})
