"""The shard format, in one place: dataset.json, shard names and the example features.

The Beam job writes with `encode_example` and `DatasetSpec.to_json`; the tf.data reader
parses with `FeatureSpec.parse_feature` and `FeatureSpec.decode`, readers.numpy with
`decode_example`. Nothing else in the project knows how a window is laid out in a
`tf.train.Example`; the protobuf wire format itself is in `readers.format.wire`.

TensorFlow is imported where it is used, not at the top: the Beam job checks its flags
and output directory against these names before it imports TensorFlow, whose import
logs lines of its own.
"""
from __future__ import annotations

import dataclasses
import functools
import json
import re
from typing import TYPE_CHECKING, Any, Mapping, Optional

import numpy as np

from readers.format.wire import (ENCODINGS, IMAGE_ENCODINGS, list_values, read_varint)
from readers.format.wire import (Layout, decode_example, encode_example,  # noqa: F401 (the
                               layout, stored_dtype)                    # format's API)

if TYPE_CHECKING:
    import tensorflow as tf

FORMAT_VERSION = 2
READABLE_VERSIONS = (1, 2)   # 2 added how features are stored, and the sidecars
DATASET_JSON = "dataset.json"
FAILURES_JSONL = "failures.jsonl"
BAD_FRAMES_JSONL = "bad_frames.jsonl"
VIDEOS_JSONL = "videos.jsonl"
MASK_MEANING = {"1": "a real frame of the video",
                "0": "padding past the video's end, or a bad frame (missing or "
                     "undecodable): its values are zeros and its label 0"}

_SUFFIX = {"none": ".tfrecord", "gzip": ".tfrecord.gz"}
_TF_COMPRESSION = {"none": "", "gzip": "GZIP"}


COMPRESSIONS = tuple(_SUFFIX)
MAX_SHARDS = 99_999   # shard names number them in five digits
_SHARD_NAME = re.compile(r"^[A-Za-z0-9_]+-\d{5}-of-\d{5}\.tfrecord(\.gz)?$")


def shard_name(split: str, index: int, num_shards: int, compression: str) -> str:
    return f"{split}-{index:05d}-of-{num_shards:05d}{_SUFFIX[compression]}"


def is_shard_name(name: str) -> bool:
    return bool(_SHARD_NAME.match(name))


INDEX_SUFFIX = ".index"


def index_name(shard: str) -> str:
    """The offset index beside an uncompressed shard: one little-endian uint64 per
    record (where its frame starts), then the shard's length; record i is the frame in
    [offsets[i], offsets[i + 1])."""
    return shard + INDEX_SUFFIX


def is_index_name(name: str) -> bool:
    return name.endswith(INDEX_SUFFIX) and is_shard_name(name[:-len(INDEX_SUFFIX)])


def tf_compression_type(compression: str) -> str:
    """The `compression_type` argument of `tf.data.TFRecordDataset` for a dataset."""
    return _TF_COMPRESSION[compression]


@dataclasses.dataclass(frozen=True)
class FeatureSpec:
    name: str
    shape: tuple[int, ...]
    dtype: str
    encoding: str

    def __post_init__(self):
        if self.encoding not in ENCODINGS:
            raise ValueError(f"feature {self.name!r}: unknown encoding {self.encoding!r}")

    @classmethod
    def for_array(cls, name: str, shape: tuple[int, ...], dtype: str) -> "FeatureSpec":
        """The encoding that keeps `dtype` and parses fastest."""
        if dtype == "float32":
            return cls(name, tuple(shape), dtype, "float")
        if dtype == "int64":
            return cls(name, tuple(shape), dtype, "int64")
        return cls(name, tuple(shape), dtype, "raw")

    def parse_feature(self) -> tf.io.FixedLenFeature:
        import tensorflow as tf

        if self.encoding == "float":
            return tf.io.FixedLenFeature(self.shape, tf.float32)
        if self.encoding == "int64":
            return tf.io.FixedLenFeature(self.shape, tf.int64)
        if self.encoding in IMAGE_ENCODINGS:
            return tf.io.FixedLenFeature(self.shape[:1], tf.string)
        return tf.io.FixedLenFeature([], tf.string)

    def decode(self, parsed: tf.Tensor) -> tf.Tensor:
        """Turn a batch parsed with `parse_feature` into [batch, *shape] of `dtype`."""
        import tensorflow as tf

        if self.encoding in IMAGE_ENCODINGS:
            return self._decode_images(parsed)
        if self.encoding != "raw":
            return parsed
        values = tf.io.decode_raw(parsed, tf.dtypes.as_dtype(self.dtype), little_endian=True)
        return tf.reshape(values, [-1, *self.shape])

    def _decode_images(self, parsed: "tf.Tensor") -> "tf.Tensor":
        """[batch, L] encoded frames -> uint8 [batch, L, H, W, C], frames decoded in parallel."""
        import tensorflow as tf

        # JPEG with libjpeg's accurate integer DCT: the values Pillow gives (readers.numpy),
        # where TensorFlow's default fast DCT differs by up to 5 levels.
        decode = tf.io.decode_png if self.encoding == "png" else functools.partial(
            tf.io.decode_jpeg, dct_method="INTEGER_ACCURATE")
        frame_shape = self.shape[1:]
        frames = tf.map_fn(
            lambda data: tf.ensure_shape(decode(data, channels=frame_shape[-1]), frame_shape),
            tf.reshape(parsed, [-1]), fn_output_signature=tf.TensorSpec(frame_shape, tf.uint8),
            parallel_iterations=32)
        return tf.reshape(frames, [-1, *self.shape])

    def from_wire(self, kind: str, record: bytes, start: int, end: int) -> Any:
        """This feature's value from its list message, record[start:end] (see
        `decode_example`)."""
        expected = {"float": "float", "int64": "int64"}.get(self.encoding, "bytes")
        if kind != expected:
            raise ValueError(f"feature {self.name!r} is a {kind} list, not {expected}")
        if end > start and record[start] == 0x0A:      # the usual: one field of values
            length, at = read_varint(record, start + 1)
            if at + length == end:
                if self.encoding == "float":             # packed floats: one view
                    return np.frombuffer(record, "<f4", length // 4, at).reshape(self.shape)
                if self.encoding == "bytes":
                    return bytes(record[at:end])
                if self.encoding == "int64" and not self.shape:   # one packed varint
                    value, after = read_varint(record, at)
                    if after == end:
                        return np.array(value - (1 << 64) if value >= 1 << 63 else value,
                                        np.int64)
        values = list_values(kind, record, start, end)
        if self.encoding == "float":
            array = values[0] if len(values) == 1 else (
                np.concatenate(values) if values else np.zeros(0, "<f4"))
            return array.reshape(self.shape)
        if self.encoding == "int64":
            return np.array(values, np.int64).reshape(self.shape)
        if self.encoding == "bytes":
            return values[0]
        if self.encoding in IMAGE_ENCODINGS:
            if len(values) != self.shape[0]:
                raise ValueError(f"feature {self.name!r}: {len(values)} frames, not "
                                 f"{self.shape[0]}")
            return values
        return np.frombuffer(values[0], np_dtype(self.dtype).newbyteorder("<")).reshape(
            self.shape)

    def stored_as(self) -> dict:
        """How the feature sits in a tf.train.Example, for readers in other codebases:
        the list kind, how many values, and what they hold."""
        count = int(np.prod(self.shape, dtype=np.int64))
        if self.encoding == "float":
            return {"list": "float_list", "values": count, "value_dtype": "float32",
                    "order": "row-major (C) flattening of shape"}
        if self.encoding == "int64":
            return {"list": "int64_list", "values": count, "value_dtype": "int64",
                    "order": "row-major (C) flattening of shape"}
        if self.encoding == "bytes":
            return {"list": "bytes_list", "values": 1, "content": "UTF-8 text"}
        if self.encoding == "raw":
            return {"list": "bytes_list", "values": 1, "value_dtype": self.dtype,
                    "byte_order": "little", "order": "row-major (C) flattening of shape",
                    "content": "the array's bytes"}
        stored = {"list": "bytes_list", "values": self.shape[0],
                  "content": f"one encoded image per frame ({self.encoding.upper()})",
                  "image_format": self.encoding, "decoded_shape": list(self.shape[1:]),
                  "decoded_dtype": self.dtype}
        if self.encoding == "jpeg":
            stored["jpeg_dct"] = ("accurate integer (libjpeg ISLOW; TensorFlow's "
                                  "dct_method='INTEGER_ACCURATE'), as the readers decode")
        return stored

    def to_json(self) -> dict:
        return {"name": self.name, "shape": list(self.shape), "dtype": self.dtype,
                "encoding": self.encoding, "stored_as": self.stored_as()}

    @classmethod
    def from_json(cls, d: Mapping) -> "FeatureSpec":
        return cls(d["name"], tuple(d["shape"]), d["dtype"], d["encoding"])


def np_dtype(name: str) -> np.dtype:
    """The numpy dtype of a feature dtype; bfloat16 comes from ml_dtypes (TensorFlow's)."""
    if name == "bfloat16":
        import ml_dtypes
        return np.dtype(ml_dtypes.bfloat16)
    return np.dtype(name)


def window_features(window: FeatureSpec, metadata_length: int = 0,
                    label_shape: Optional[tuple[int, ...]] = None) -> list[FeatureSpec]:
    """The features of one window example: window [L, ...], mask [L], labels [L, ...]
    when the videos have per-frame labels, metadata [K] when they have metadata, video_id
    and start.

    `window` is `FeatureSpec.for_array` of latents, or uint8 [L, H, W, C] pixels stored
    raw or as one encoded image per frame (encoding png or jpeg).
    """
    length = window.shape[0]
    features = [window, FeatureSpec("mask", (length,), "float32", "float")]
    if label_shape is not None:
        features.append(FeatureSpec("labels", (length, *label_shape), "float32", "float"))
    if metadata_length:
        features.append(FeatureSpec("metadata", (metadata_length,), "float32", "float"))
    return features + [FeatureSpec("video_id", (), "string", "bytes"),
                       FeatureSpec("start", (), "int64", "int64")]


@dataclasses.dataclass(frozen=True)
class Shard:
    file: str
    examples: int
    index: Optional[str] = None   # its offset index (uncompressed shards only)


@dataclasses.dataclass(frozen=True)
class SplitInfo:
    videos: int
    windows: int
    skipped_short: int
    shards: tuple[Shard, ...]
    bad_frames: int = 0
    frames: int = 0


@dataclasses.dataclass(frozen=True)
class DatasetSpec:
    """The contents of dataset.json."""
    window: Mapping[str, Any]            # {"length", "stride", "tail"}
    features: tuple[FeatureSpec, ...]
    compression: str
    splits: Mapping[str, SplitInfo]
    failures: int = 0
    flags: Mapping[str, Any] = dataclasses.field(default_factory=dict)
    encoder: Optional[Mapping[str, Any]] = None   # path, shapes, checksum of the model
    format_version: int = FORMAT_VERSION
    run_id: Optional[str] = None                   # the run that wrote it
    files: tuple[str, ...] = ()                    # every file of the dataset but this one
    job_version: Optional[str] = None
    input_kind: Optional[str] = None               # latents, manifest or videos
    frame: Mapping[str, Any] = dataclasses.field(default_factory=dict)  # one frame
    labels: Optional[Mapping[str, Any]] = None     # shape and names, when there are labels

    def feature(self, name: str) -> FeatureSpec:
        for f in self.features:
            if f.name == name:
                return f
        raise KeyError(name)

    def to_json(self) -> str:
        return json.dumps({
            "format_version": self.format_version,
            "job_version": self.job_version,
            "input_kind": self.input_kind,
            "window": dict(self.window),
            "features": [f.to_json() for f in self.features],
            "frame": dict(self.frame),
            "mask": MASK_MEANING,
            "labels": None if self.labels is None else dict(self.labels),
            "compression": self.compression,
            "tf_compression_type": tf_compression_type(self.compression),
            "videos_file": VIDEOS_JSONL if VIDEOS_JSONL in self.files else None,
            "failures": self.failures,
            "encoder": self.encoder,
            "splits": {name: {"videos": s.videos, "windows": s.windows,
                              "skipped_short": s.skipped_short, "frames": s.frames,
                              "bad_frames": s.bad_frames,
                              "shards": [dataclasses.asdict(sh) for sh in s.shards]}
                       for name, s in self.splits.items()},
            "flags": dict(self.flags),
            "run_id": self.run_id,
            "files": list(self.files),
        }, indent=2, sort_keys=False) + "\n"

    @classmethod
    def from_json(cls, text: str, source: str = DATASET_JSON) -> "DatasetSpec":
        d = json.loads(text)
        version = d.get("format_version")
        if version not in READABLE_VERSIONS:
            raise ValueError(f"{source}: unknown format version {version!r}; this reader "
                             f"reads versions {list(READABLE_VERSIONS)}")
        splits = {name: SplitInfo(s["videos"], s["windows"], s["skipped_short"],
                                  tuple(Shard(**sh) for sh in s["shards"]),
                                  s.get("bad_frames", 0), s.get("frames", 0))
                  for name, s in d["splits"].items()}
        return cls(window=d["window"],
                   features=tuple(FeatureSpec.from_json(f) for f in d["features"]),
                   compression=d["compression"], splits=splits,
                   failures=d.get("failures", 0), flags=d.get("flags", {}),
                   encoder=d.get("encoder"),
                   format_version=version, run_id=d.get("run_id"),
                   files=tuple(d.get("files", ())), job_version=d.get("job_version"),
                   input_kind=d.get("input_kind"), frame=d.get("frame") or {},
                   labels=d.get("labels"))
