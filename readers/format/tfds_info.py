"""What TensorFlow Datasets reads beside the shards, made from dataset.json's spec (numpy
only; no TFDS here), so that `tfds.builder_from_directory(out)` opens a dataset as it is,
with nothing renamed. It is derived: the commit rewrites it right after dataset.json
moves, the next run rewrites it where a kill came in between, and `--verify` compares it.

- dataset_info.json: DatasetInfo as protobuf JSON: a version x.y.z, `fileFormat:
  tfrecord`, and per split `shardLengths` (exact: TFDS reads that many records a shard)
  and a `filepathTemplate` whose split name and run id are literal text, `train-
  {SHARD_X_OF_Y}-RUNID.{FILEFORMAT}`, which TFDS formats into our shard names (five
  digits, as ours). A dataset of several generations (`--append`) has a TFDS split per
  split and generation, `train-g1`, `train-g2`, ... (`split_names`).
- the features: a FeaturesDict, one TFDS feature per FeatureSpec (`FEATURE_OF`): a
  float, int64 or bytes list is a `Tensor` (encoding "none"); a raw array a `Tensor` of
  its dtype with encoding "bytes" (TFDS decodes it with `tf.io.decode_raw`, little endian,
  as ours); the encoded frames of a png or jpeg window a `Sequence` of L `Image`s. Since
  format 5 inside dataset_info.json (its `features`, which `builder_from_directory`
  reads before it looks for features.json), so that the TFDS view is one file, replaced
  whole; before, in features.json.

Gzip datasets get none: TFDS opens TFRecords without a compression type, so it
cannot read their shards (`files` is then empty). The bytes are deterministic (sorted
keys), so `readers.inspect --verify` regenerates them and compares.
"""
from __future__ import annotations

import json
import pathlib
from typing import Callable, Optional

from readers.format.features import FeatureSpec
from readers.format.names import DATASET_INFO_JSON, FEATURES_JSON, run_id_of, shard_name
from readers.format.spec import DatasetSpec
from readers.format.splits import Shard

NAME = "video_window_shards"      # the builder's name TFDS shows
READABLE_COMPRESSIONS = ("none",)
_TENSOR = "tensorflow_datasets.core.features.tensor_feature.Tensor"
_SEQUENCE = "tensorflow_datasets.core.features.sequence_feature.Sequence"
_IMAGE = "tensorflow_datasets.core.features.image_feature.Image"
_FEATURES_DICT = "tensorflow_datasets.core.features.features_dict.FeaturesDict"


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
    return (DATASET_INFO_JSON,) if compression in READABLE_COMPRESSIONS else ()


def _json_bytes(value: dict) -> bytes:
    return (json.dumps(value, indent=2, sort_keys=True) + "\n").encode("utf-8")


def _split(spec: DatasetSpec, name: str, run_id: Optional[str], tfds_name: str) -> dict:
    """The SplitInfo of split `name`'s shards of run `run_id`, named `tfds_name`, whose
    template carries the split's name and the run id as literal text; ValueError when
    the shards are not the names TFDS makes from it (a dataset.json the job did not
    write)."""
    shards = [s for s in spec.splits[name].shards if run_id_of(s.file) == run_id]
    run = f"-{run_id}" if run_id else ""
    _check_tfds_names(shards, name, spec.compression, run_id)
    info = {"name": tfds_name, "shardLengths": [str(shard.examples) for shard in shards],
            "filepathTemplate": f"{name}-{{SHARD_X_OF_Y}}{run}.{{FILEFORMAT}}"}
    sizes = [shard.bytes for shard in shards if shard.bytes is not None]
    if len(sizes) == len(shards):   # builder.info.dataset_size
        info["numBytes"] = str(sum(sizes))
    return info


def _check_tfds_names(shards: list[Shard], name: str, compression: str,
                      run_id: Optional[str]) -> None:
    """ValueError unless `shards` are named, in order, as TFDS opens split `name`'s
    shards of run `run_id`."""
    expected = [shard_name(name, i, len(shards), compression, run_id or "")
                for i in range(len(shards))]
    if [shard.file for shard in shards] != expected:
        run = f"-{run_id}" if run_id else ""
        raise ValueError(f"split {name!r}: its shards are not named {name}-NNNNN-of-"
                         f"{len(shards):05d}{run}.tfrecord in order, as TFDS would open them")


def shards_of(info: dict) -> list[tuple[str, int]]:
    """(shard name, records) of every shard a dataset_info.json's splits name, as TFDS
    would open them; ValueError when it is not such a file."""
    try:
        shards = []
        for split in info["splits"]:
            lengths = [int(n) for n in split.get("shardLengths", [])]
            template = split["filepathTemplate"].replace("{FILEFORMAT}", "tfrecord")
            shards += [(template.replace("{SHARD_X_OF_Y}", f"{i:05d}-of-{len(lengths):05d}"),
                        length) for i, length in enumerate(lengths)]
    except (KeyError, TypeError, ValueError, AttributeError) as e:
        raise ValueError(f"not a dataset_info.json of this job ({e})") from None
    return shards


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
            for run_id, tfds_name in zip(runs, split_names(spec, name), strict=True)]


def _description(spec: DatasetSpec) -> str:
    """What `builder.info.description` says: this dataset's windows, not boilerplate."""
    window = spec.feature("window")
    splits = ", ".join(f"{name} {split.windows:,} windows of {split.videos:,} videos"
                       for name, split in spec.splits.items())
    return (f"Windows of {spec.window.length} frames every {spec.window.stride} "
            f"({window.dtype} {list(window.shape)}, {window.encoding}) cut from "
            f"{spec.input_kind or 'videos'} by video-window-shards "
            f"{spec.job_version or ''} (run {spec.run_id or 'without an id'}, "
            f"{len(spec.generations)} generation(s)): {splits}. Features: "
            f"{', '.join(f.name for f in spec.features)}. dataset.json beside this file is "
            "the full spec; python -m readers.inspect DIR shows it.")


def _citation(spec: DatasetSpec) -> str:
    """A BibTeX entry naming this dataset's run (TFDS shows none otherwise)."""
    run = spec.run_id or "unknown"
    return (f"@misc{{video_window_shards_{run},\n  title = {{Video windows, run {run}}},\n"
            f"  note = {{Written by video-window-shards {spec.job_version or ''}; "
            f"format version {spec.format_version}}}\n}}")


def _homepage(spec: DatasetSpec) -> Optional[str]:
    """The job's --homepage, else where it wrote the dataset (a local directory as a
    file:// URL): TFDS names a catalog page that does not exist when there is none."""
    given, written = spec.flags.get("homepage"), spec.flags.get("output_dir")
    if given or not isinstance(written, str):
        return given
    path = pathlib.PurePosixPath(written)
    return path.as_uri() if "://" not in written and path.is_absolute() else written


def dataset_info(spec: DatasetSpec) -> dict:
    """dataset_info.json's content: DatasetInfo as protobuf JSON (camelCase fields)."""
    homepage = _homepage(spec)
    return {
        "name": NAME,
        "version": f"{spec.format_version}.0.0",
        "description": _description(spec),
        "citation": _citation(spec),
        **({"location": {"urls": [homepage]}} if homepage else {}),
        "fileFormat": "tfrecord",
        "splits": _splits(spec),
    }


def _features_dict(spec: DatasetSpec) -> dict:
    """The FeaturesDict of a window example, as its proto's JSON."""
    return {"features": {f.name: FEATURE_OF[f.encoding](f) for f in spec.features}}


def files(spec: DatasetSpec) -> dict[str, bytes]:
    """{name: bytes} of the TFDS files of `spec`'s dataset ({} for gzip): since format 5
    dataset_info.json alone, holding the features; before, features.json beside it.
    ValueError when its shards are not named as TFDS would open them."""
    if spec.compression not in READABLE_COMPRESSIONS:
        return {}
    info = dataset_info(spec)
    if spec.format_version < 5:
        return {DATASET_INFO_JSON: _json_bytes(info), FEATURES_JSON: _json_bytes({
            "type": "tensorflow_datasets.core.features.features_dict.FeaturesDict",
            "proto_cls": "tensorflow_datasets.FeaturesDict", "content": _features_dict(spec)})}
    return {DATASET_INFO_JSON: _json_bytes({**info, "features": {
        "pythonClassName": _FEATURES_DICT, "featuresDict": _features_dict(spec)}})}
