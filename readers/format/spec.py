"""dataset.json: the features of a window example, the splits and their shards, and
`load_spec`, which reads it (numpy only: local paths, or any fsspec scheme)."""
from __future__ import annotations

import dataclasses
import functools
import json
import os
from typing import Any, Mapping, Optional

from readers.format.codecs import CODECS, Codec
from readers.format.names import DATASET_JSON, VIDEOS_JSONL, tf_compression_type

FORMAT_VERSION = 2
READABLE_VERSIONS = (1, 2)   # 2 added how features are stored, and the sidecars
MASK_MEANING = {"1": "a real frame of the video",
                "0": "padding past the video's end, or a bad frame (missing or "
                     "undecodable): its values are zeros and its label 0"}


@dataclasses.dataclass(frozen=True)
class FeatureSpec:
    name: str
    shape: tuple[int, ...]
    dtype: str
    encoding: str

    def __post_init__(self):
        if self.encoding not in CODECS:
            raise ValueError(f"feature {self.name!r}: unknown encoding {self.encoding!r}")

    @classmethod
    def for_array(cls, name: str, shape: tuple[int, ...], dtype: str) -> "FeatureSpec":
        """The encoding that keeps `dtype` and parses fastest."""
        if dtype == "float32":
            return cls(name, tuple(shape), dtype, "float")
        if dtype == "int64":
            return cls(name, tuple(shape), dtype, "int64")
        return cls(name, tuple(shape), dtype, "raw")

    @functools.cached_property
    def codec(self) -> Codec:
        """What this feature's encoding decides: its wire bytes and how readers read them."""
        return CODECS[self.encoding](self)

    def to_json(self) -> dict:
        return {"name": self.name, "shape": list(self.shape), "dtype": self.dtype,
                "encoding": self.encoding, "stored_as": self.codec.stored_as()}

    @classmethod
    def from_json(cls, d: Mapping) -> "FeatureSpec":
        return cls(d["name"], tuple(d["shape"]), d["dtype"], d["encoding"])


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


def load_spec(path: str) -> DatasetSpec:
    """`path/dataset.json` (a local path, or any scheme fsspec knows: gs:// too)."""
    json_path = os.path.join(path, DATASET_JSON)
    try:
        if "://" in path and not path.startswith("file://"):
            import fsspec
            fs, _ = fsspec.core.url_to_fs(json_path)
            text = fs.cat_file(json_path)     # one request
        else:
            with open(json_path.removeprefix("file://"), "rb") as f:
                text = f.read()
    except FileNotFoundError:
        raise FileNotFoundError(
            f"{path} is not a finished dataset: it has no {DATASET_JSON} "
            "(the job writes it last; is the job still running, or did it fail?)") from None
    return DatasetSpec.from_json(text.decode("utf-8"), source=json_path)
