"""The two files TensorFlow Datasets reads beside the shards, made from dataset.json's spec
(numpy only; no TFDS here), so that `tfds.builder_from_directory(out)` opens a dataset as
it is, with nothing renamed.

- dataset_info.json: DatasetInfo as protobuf JSON: a version x.y.z, `fileFormat:
  tfrecord`, and per split `shardLengths` (exact: TFDS reads that many records a shard)
  and a `filepathTemplate` whose split name and run id are literal text, `train-
  {SHARD_X_OF_Y}-RUNID.{FILEFORMAT}`, which TFDS formats into our shard names (five
  digits, as ours). A dataset of several generations (`--append`) has a TFDS split per
  split and generation, `train-g1`, `train-g2`, ... (`split_names`).
- features.json: a FeaturesDict, one TFDS feature per FeatureSpec (`FEATURE_OF`): a
  float, int64 or bytes list is a `Tensor` (encoding "none"); a raw array a `Tensor` of
  its dtype with encoding "bytes" (TFDS decodes it with `tf.io.decode_raw`, little endian,
  as ours); the encoded frames of a png or jpeg window a `Sequence` of L `Image`s.

Gzip datasets get neither file: TFDS opens TFRecords without a compression type, so it
cannot read their shards (`files` is then empty). The bytes are deterministic (sorted
keys), so `readers.inspect --verify` regenerates them and compares.
"""
from __future__ import annotations

import json
from typing import Callable, Optional

from readers.format.names import (
    DATASET_INFO_JSON, FEATURES_JSON, TFDS_FILES, run_id_of, shard_name)
from readers.format.spec import DatasetSpec, FeatureSpec

NAME = "video_window_shards"      # the builder's name TFDS shows
READABLE_COMPRESSIONS = ("none",)
_TENSOR = "tensorflow_datasets.core.features.tensor_feature.Tensor"
_SEQUENCE = "tensorflow_datasets.core.features.sequence_feature.Sequence"
_IMAGE = "tensorflow_datasets.core.features.image_feature.Image"


def _shape(shape) -> dict:
    """A Shape proto in JSON: int64 dimensions are strings, a scalar has none."""
    return {"dimensions": [str(d) for d in shape]} if shape else {}


def _tensor(feature: FeatureSpec, dtype: str, encoding: str) -> dict:
    return {"pythonClassName": _TENSOR, "tensor": {
        "shape": _shape(feature.shape), "dtype": dtype, "encoding": encoding}}


def _frames(feature: FeatureSpec) -> dict:
    """L encoded frames: a Sequence of `length` L of Image [H, W, C]; TFDS decodes them
    (jpeg with its fast DCT unless the reader passes a decoder, see docs/readers.md)."""
    length, *frame = feature.shape
    return {"pythonClassName": _SEQUENCE, "sequence": {"length": str(length), "feature": {
        "pythonClassName": _IMAGE, "image": {
            "shape": _shape(frame), "dtype": feature.dtype,
            "encodingFormat": feature.encoding}}}}


# The TFDS feature of each encoding (readers.format.codecs); a test checks every one has.
FEATURE_OF: dict[str, Callable[[FeatureSpec], dict]] = {
    "float": lambda f: _tensor(f, "float32", "none"),
    "int64": lambda f: _tensor(f, "int64", "none"),
    "bytes": lambda f: _tensor(f, "string", "none"),
    "raw": lambda f: _tensor(f, f.dtype, "bytes"),
    "png": _frames,
    "jpeg": _frames,
}


def file_names(compression: str) -> tuple[str, ...]:
    """The TFDS files a dataset of `compression` has (none for gzip, which TFDS cannot
    read); dataset.json lists them among its `files`."""
    return TFDS_FILES if compression in READABLE_COMPRESSIONS else ()


def _json_bytes(value: dict) -> bytes:
    return (json.dumps(value, indent=2, sort_keys=True) + "\n").encode("utf-8")


def _split(spec: DatasetSpec, name: str, run_id: Optional[str], tfds_name: str) -> dict:
    """The SplitInfo of split `name`'s shards of run `run_id`, named `tfds_name`, whose
    template carries the split's name and the run id as literal text; ValueError when
    the shards are not the names TFDS makes from it (a dataset.json the job did not
    write)."""
    shards = [s for s in spec.splits[name].shards if run_id_of(s.file) == run_id]
    run = f"-{run_id}" if run_id else ""
    expected = [shard_name(name, i, len(shards), spec.compression, run_id or "")
                for i in range(len(shards))]
    if [shard.file for shard in shards] != expected:
        raise ValueError(f"split {name!r}: its shards are not named {name}-NNNNN-of-"
                         f"{len(shards):05d}{run}.tfrecord in order, as TFDS would open them")
    return {"name": tfds_name, "shardLengths": [str(shard.examples) for shard in shards],
            "filepathTemplate": f"{name}-{{SHARD_X_OF_Y}}{run}.{{FILEFORMAT}}"}


def split_names(spec: DatasetSpec, split: str) -> list[str]:
    """The TFDS splits that hold `split`'s windows: the split itself when the dataset
    has one generation; else one per generation, `train-g1`, `train-g2`, ... (a TFDS
    SplitInfo has one file template, and each generation's shards have their own run
    id and count). Read them all with `"+".join(split_names(spec, "train"))`."""
    if len(spec.generations) == 1:
        return [split]
    return [f"{split}-g{k}" for k in range(1, len(spec.generations) + 1)]


def _splits(spec: DatasetSpec) -> list[dict]:
    runs = [g.run_id for g in spec.generations]
    return [_split(spec, name, run_id, tfds_name) for name in spec.splits
            for run_id, tfds_name in zip(runs, split_names(spec, name))]


def dataset_info(spec: DatasetSpec) -> dict:
    """dataset_info.json's content: DatasetInfo as protobuf JSON (camelCase fields)."""
    return {
        "name": NAME,
        "version": f"{spec.format_version}.0.0",
        "description": "Fixed-length windows of videos (frames or latents) written by "
                       "video-window-shards; dataset.json beside this file is the full spec.",
        "fileFormat": "tfrecord",
        "splits": _splits(spec),
    }


def features(spec: DatasetSpec) -> dict:
    """features.json's content: the FeaturesDict of a window example."""
    return {"type": "tensorflow_datasets.core.features.features_dict.FeaturesDict",
            "proto_cls": "tensorflow_datasets.FeaturesDict",
            "content": {"features": {f.name: FEATURE_OF[f.encoding](f) for f in spec.features}}}


def files(spec: DatasetSpec) -> dict[str, bytes]:
    """{name: bytes} of the TFDS files of `spec`'s dataset ({} for gzip); ValueError
    when its shards are not named as TFDS would open them."""
    if not file_names(spec.compression):
        return {}
    return {DATASET_INFO_JSON: _json_bytes(dataset_info(spec)),
            FEATURES_JSON: _json_bytes(features(spec))}
