"""dataset.json: the features of a window example, the splits and their shards, and
`load_spec`, which reads it (numpy only: local paths, or any fsspec scheme).

A reader trusts dataset.json only once `DatasetSpec.from_json` has checked it: its
structure, every file name in it a plain name of its kind (so no reader leaves the
dataset's directory), each feature's dtype and shape one its encoding holds, and an
example no larger than a protobuf can be; `SpecError` says what is wrong otherwise.
`DatasetSpec.check_shard` checks a shard's size against its records, so that nothing is
allocated by a shape the files cannot hold.
"""
from __future__ import annotations

import dataclasses
import functools
import json
import os
from typing import Any, Mapping, Optional, Union

from readers.format.channel_stats import ChannelStats, parse_stats
from readers.format.encodings import CODECS, Codec
from readers.format.generations import (
    Generation,
    check_generation_counts,
    check_generations,
    generations_of,
    parse_generation,
)
from readers.format.json_checks import (
    Bad,
    DuplicateKey,
    at,
    count,
    get,
    no_duplicate_keys,
    shown,
    typed,
)
from readers.format.locations import is_remote
from readers.format.names import (
    COMPRESSIONS,
    DATASET_JSON,
    RUN_ID,
    SIDECAR_KINDS,
    index_name,
    is_dataset_file,
    is_shard_name,
    run_id_of,
    shard_suffix,
    sidecar_name,
    table_name,
    tf_compression_type,
)
from readers.format.splits import Shard, SplitInfo
from readers.format.tfrecord import FRAME_OVERHEAD

FORMAT_VERSION = 6
# 2 added how features are stored, and the sidecars; 3 made the offset index text
# (readers.format.index), which a reader of 1 and 2 would take for binary offsets; 4 added
# generations (`--append`): a split's shards may be of several runs, which a reader of 3
# would refuse as another dataset's; 5 names the sidecars by the run that committed them
# (`videos-RUNID.jsonl`, dataset.json's `videos_file` ...), so that one move of
# dataset.json commits them too, and puts TFDS's features inside dataset_info.json; 6 adds
# a window table beside each shard (readers.format.window_table), listed in `files`, whose
# names a reader of 5 would refuse as no file of a dataset's
READABLE_VERSIONS = (1, 2, 3, 4, 5, 6)
_PLAIN_SIDECARS = {kind: f"{kind}.jsonl" for kind in SIDECAR_KINDS}
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
        try:
            CODECS[self.encoding].check(self)
        except ValueError as e:
            raise ValueError(f"feature {self.name!r}: {e}") from None

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


# The features of shape [L, ...] that follow the window's frames (a reader's clip cuts them)
PER_FRAME = ("window", "mask", "labels")


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
    # The runs that added windows, oldest first; the last is `run_id`'s. A dataset.json
    # before version 4 has one, made from its counts (`generations_of`).
    generations: tuple[Generation, ...] = ()
    # The sidecar of each kind (SIDECAR_KINDS) the dataset has, by name: since version 5
    # `sidecar_name(kind, run_id)`, before it the plain `videos.jsonl` ...
    sidecars: Mapping[str, str] = dataclasses.field(default_factory=dict)
    # The job's statistics, {split: {feature: ChannelStats}} of `window` and `labels`
    # (readers/format/channel_stats.py); empty where dataset.json has none (written
    # before they were recorded, or an --append to such a dataset). An optional key.
    stats: Mapping[str, Mapping[str, ChannelStats]] = dataclasses.field(default_factory=dict)

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
            **{f"{kind}_file": self.sidecars.get(kind) for kind in SIDECAR_KINDS},
            "failures": self.failures,
            "encoder": self.encoder,
            "splits": {name: _split_json(s) for name, s in self.splits.items()},
            **({"stats": _stats_json(self.stats)} if self.stats else {}),
            "flags": dict(self.flags),
            "run_id": self.run_id,
            "generations": [g.to_json() for g in self.generations or generations_of(
                self.splits, self.run_id, self.failures, self.job_version)],
            "files": list(self.files),
        }, indent=2, sort_keys=False) + "\n"

    @functools.cached_property
    def min_frame_bytes(self) -> int:
        """The fewest bytes one record's TFRecord frame can take, by the features' shapes
        (each codec's `min_bytes`)."""
        return FRAME_OVERHEAD + sum(f.codec.min_bytes() for f in self.features)

    def check_shard(self, shard: Shard, size: int) -> None:
        """SpecError naming `shard`, of `size` bytes on disk, when it is not what
        dataset.json says: not the size dataset.json records (where it does); or, a
        record being no larger than its shard, too small for its records at the
        features' shapes, which means those shapes (or counts) are not its."""
        if shard.bytes is not None and shard.bytes != size:
            raise SpecError(f"{shard.file}: {size:,} bytes, where dataset.json says "
                            f"{shard.bytes:,}: it was "
                            f"{'cut short' if size < shard.bytes else 'added to'} or replaced")
        if shard.examples * self.min_frame_bytes > size * _EXPANSION[self.compression]:
            raise SpecError(f"{shard.file}: {size:,} bytes cannot hold its "
                            f"{shard.examples:,} records of at least "
                            f"{self.min_frame_bytes:,} bytes each: dataset.json's shapes or "
                            "counts are not those of its shards")

    @classmethod
    def from_json(cls, text: Union[str, bytes], source: str = DATASET_JSON) -> "DatasetSpec":
        """dataset.json's text (bytes: UTF-8), checked as the module says; SpecError
        naming `source` and what is wrong."""
        try:
            d = json.loads(text.decode("utf-8") if isinstance(text, bytes) else text,
                           object_pairs_hook=no_duplicate_keys)
        except DuplicateKey as e:
            raise SpecError(f"{source}: {e}") from None
        except (ValueError, RecursionError) as e:
            raise SpecError(f"{source}: not JSON ({e})") from None
        try:
            return cls(**_parse(d))
        except Bad as e:
            raise SpecError(f"{source}: {e}") from None


class SpecError(ValueError):
    """A dataset.json that no reader can trust, with the file and what is wrong. A
    ValueError, so that whoever refuses a bad dataset.json can catch that."""


MAX_EXAMPLE_BYTES = 2**31 - 1     # protobuf's limit on a message: no Example is larger
# How many bytes of records a byte of shard can hold: deflate's largest ratio is 1032:1.
_EXPANSION = {"none": 1, "gzip": 1032}
def _parse(d: Any) -> dict:
    """DatasetSpec's fields from dataset.json's parsed JSON; Bad when anything is not
    as the job writes it."""
    version = _format_version(d)
    window, length = _window(d)
    features = tuple(_feature(f, at("features", i))
                     for i, f in enumerate(get(d, "features", list, "")))
    _check_features(features, length)
    compression = _compression(d)
    run_id = _run_id(d)
    raw_splits = get(d, "splits", dict, "")
    generations = _generations(d, version)
    run_ids = check_generations(generations, run_id)
    splits = {name: _split(split, at("splits", name), name, compression, run_ids)
              for name, split in raw_splits.items()}
    if generations is None:
        generations = generations_of(splits, run_id, count(d, "failures", "", 0),
                                     get(d, "job_version", str, "", None))
    else:
        check_generation_counts(generations, splits)
    _check_listed_once(splits)
    files = _files(d)
    sidecars = _sidecars(d, version, run_id, files)
    return dict(window=window, features=features, compression=compression, splits=splits,
                failures=count(d, "failures", "", 0), flags=get(d, "flags", dict, "", {}),
                encoder=get(d, "encoder", dict, "", None), format_version=version,
                run_id=run_id, files=files, job_version=get(d, "job_version", str, "", None),
                input_kind=get(d, "input_kind", str, "", None),
                frame=get(d, "frame", dict, "", {}), labels=get(d, "labels", dict, "", None),
                generations=generations, sidecars=sidecars,
                stats=parse_stats(d.get("stats"), splits, features))


def _format_version(d: Any) -> int:
    """The format version of a top level that must be an object; Bad for one this
    reader does not read."""
    version = typed(d, dict, "the top level").get("format_version")
    if type(version) is not int or version not in READABLE_VERSIONS:
        raise Bad(f"unknown format version {version!r}; this reader reads versions "
                   f"{list(READABLE_VERSIONS)}")
    return version


def _window(d: dict) -> tuple[dict, int]:
    """The window object and its length, its length, stride and tail checked."""
    window = get(d, "window", dict, "")
    length = count(window, "length", "window", least=1)
    count(window, "stride", "window", least=1)
    get(window, "tail", str, "window")
    return window, length


def _compression(d: dict) -> str:
    compression = get(d, "compression", str, "")
    if compression not in COMPRESSIONS:
        raise Bad(f"compression: {compression!r} is not one of {list(COMPRESSIONS)}")
    return compression


def _run_id(d: dict) -> Optional[str]:
    run_id = get(d, "run_id", str, "", None)
    if run_id is not None and not RUN_ID.fullmatch(run_id):
        raise Bad(f"run_id: {run_id!r} is not a run id (12 hex digits)")
    return run_id


def _generations(d: dict, version: int) -> Optional[tuple[Generation, ...]]:
    """The generations dataset.json lists (since version 4), each checked; None
    before."""
    if version < 4:
        return None
    return tuple(parse_generation(g, at("generations", i))
                 for i, g in enumerate(get(d, "generations", list, "")))


def _check_listed_once(splits: dict[str, SplitInfo]) -> None:
    """Bad for a shard, index or window table that the splits list twice."""
    listed = [name for split in splits.values() for shard in split.shards
              for name in (shard.file, shard.index, shard.table) if name]
    if len(set(listed)) < len(listed):
        twice = next(name for name in listed if listed.count(name) > 1)
        raise Bad(f"splits: {twice!r} is listed twice")


def _files(d: dict) -> tuple[str, ...]:
    """The files dataset.json lists (none before they were listed); Bad for a name that
    is not the plain name of one of the dataset's files."""
    files = tuple(get(d, "files", list, "", []))
    for i, name in enumerate(files):
        if not is_dataset_file(name):
            raise Bad(f"{at('files', i)}: {shown(name)} is not the plain name of "
                       "a shard, an index or a side file")
    return files


def _sidecars(d: dict, version: int, run_id: Optional[str], files: tuple[str, ...]) -> dict:
    """{kind: name} of the sidecars dataset.json names: since version 5 each `KIND_file`
    is None or `KIND-RUNID.jsonl` of its run, listed among its files; before, the plain
    names it lists (all of them, for a dataset.json that lists no files)."""
    if version < 5:
        return {kind: name for kind, name in _PLAIN_SIDECARS.items()
                if name in files or not files}
    sidecars = {}
    for kind in SIDECAR_KINDS:
        name = get(d, f"{kind}_file", str, "", None)
        if name is None:
            continue
        expected = run_id and sidecar_name(kind, run_id)
        if name != expected or name not in files:
            raise Bad(f"{kind}_file: {shown(name)} is not {expected!r}, the {kind} sidecar "
                       "of dataset.json's run, listed in its files")
        sidecars[kind] = name
    return sidecars


def _feature(d: Any, where: str) -> FeatureSpec:
    typed(d, dict, where)
    shape = get(d, "shape", list, where)
    for i, dim in enumerate(shape):
        count({"dim": dim}, "dim", at(at(where, "shape"), i))
    try:
        return FeatureSpec(get(d, "name", str, where), tuple(shape),
                           get(d, "dtype", str, where), get(d, "encoding", str, where))
    except ValueError as e:
        raise Bad(f"{where}: {e}") from None


def _check_features(features: tuple[FeatureSpec, ...], length: int) -> None:
    """The features of a window example (`window_features`), their names once each, and
    an example no larger than a protobuf message can be."""
    by_name = {f.name: f for f in features}
    if len(by_name) < len(features):
        raise Bad(f"features: {[f.name for f in features]} name one feature twice")
    window = by_name.get("window")
    if window is None or window.shape[:1] != (length,):
        raise Bad(f"features: no 'window' feature of length {length} (window.length)")
    for expected in window_features(window):
        if by_name.get(expected.name) != expected:
            raise Bad(f"features: no {expected.name!r} of shape {list(expected.shape)}, "
                       f"{expected.dtype}, {expected.encoding}")
    least = sum(f.codec.min_bytes() for f in features)
    if least > MAX_EXAMPLE_BYTES:
        big = max(features, key=lambda f: f.codec.min_bytes())
        raise Bad(f"features: an example takes at least {least:,} bytes ({big.name!r}, "
                   f"{list(big.shape)} {big.dtype}, at least {big.codec.min_bytes():,}), more "
                   f"than a tf.train.Example can hold ({MAX_EXAMPLE_BYTES:,})")


def _split(d: Any, where: str, name: str, compression: str,
           run_ids: tuple[Optional[str], ...]) -> SplitInfo:
    typed(d, dict, where)
    shards = tuple(_shard(shard, at(at(where, "shards"), i), name, compression, run_ids)
                   for i, shard in enumerate(get(d, "shards", list, where)))
    windows = count(d, "windows", where)
    if sum(shard.examples for shard in shards) != windows:
        raise Bad(f"{where}: {windows} windows, its shards hold "
                   f"{sum(shard.examples for shard in shards)}")
    return SplitInfo(count(d, "videos", where), windows, count(d, "skipped_short", where),
                     shards, count(d, "bad_frames", where, 0), count(d, "frames", where, 0))


def _shard(d: Any, where: str, split: str, compression: str,
           run_ids: tuple[Optional[str], ...]) -> Shard:
    """A shard entry; its file and index plain names of their kind (so `../x` or an
    absolute path is refused), of this split, compression and one of the dataset's runs
    (`run_ids`: its generations')."""
    typed(d, dict, where)
    file = _shard_file(d, where, split, compression, run_ids)
    index = get(d, "index", str, where, None)
    if index is not None and compression != "none":
        raise Bad(f"{at(where, 'index')}: {shown(index)}, where a gzip shard has none")
    if index is not None and index != index_name(file):
        raise Bad(f"{at(where, 'index')}: {shown(index)} is not the plain name of its "
                   f"shard's index, {index_name(file)!r}")
    table = get(d, "table", str, where, None)
    if table is not None and table != table_name(file):
        raise Bad(f"{at(where, 'table')}: {shown(table)} is not the plain name of its "
                   f"shard's window table, {table_name(file)!r}")
    return Shard(file, count(d, "examples", where), index, count(d, "bytes", where, None),
                 table)


def _shard_file(d: dict, where: str, split: str, compression: str,
                run_ids: tuple[Optional[str], ...]) -> str:
    """A shard entry's file: Bad unless it is the plain name of a shard of this split
    and compression, of one of the dataset's runs."""
    file = get(d, "file", str, where)
    if not is_shard_name(file, split) or not file.endswith(shard_suffix(compression)):
        raise Bad(f"{at(where, 'file')}: {shown(file)} is not the plain name of "
                   f"a shard of split {split!r} ({split}-NNNNN-of-NNNNN-RUNID"
                   f"{shard_suffix(compression)})")
    if run_id_of(file) not in (None, *run_ids):
        runs = (f"run {run_ids[0]}, the run" if len(run_ids) == 1 else
                f"runs {', '.join(map(str, run_ids))}, the generations")
        raise Bad(f"{at(where, 'file')}: {file!r} is a shard of run {run_id_of(file)}, "
                   f"not of {runs} dataset.json names")
    return file


def _split_json(split: SplitInfo) -> dict:
    """A split's entry in dataset.json: its counts and its shards'."""
    return {"videos": split.videos, "windows": split.windows,
            "skipped_short": split.skipped_short, "frames": split.frames,
            "bad_frames": split.bad_frames,
            "shards": [_shard_json(sh) for sh in split.shards]}


def _stats_json(stats: Mapping[str, Mapping[str, ChannelStats]]) -> dict:
    """dataset.json's stats: per split, each feature's statistics."""
    return {split: {name: s.to_json() for name, s in features.items()}
            for split, features in stats.items()}


def _shard_json(shard: Shard) -> dict:
    """A shard's entry; `bytes` only where known (not a gzip shard's, nor one written
    before dataset.json recorded sizes), `table` only where it has one (format 6 on)."""
    d = dataclasses.asdict(shard)
    for optional in ("bytes", "table"):
        if d[optional] is None:
            del d[optional]
    return d


def load_spec(path: str) -> DatasetSpec:
    """A dataset's dataset.json, checked before anything trusts it.

    Args:
      path: the output directory: a local path, or any scheme fsspec knows (gs:// too).

    Returns:
      Its `DatasetSpec`.

    Raises:
      FileNotFoundError: no dataset.json: not a finished dataset.
      SpecError: a dataset.json this reader cannot trust, with which value is wrong.
    """
    json_path = os.path.join(path, DATASET_JSON)
    try:
        if is_remote(path):
            import fsspec
            fs, inner = fsspec.core.url_to_fs(json_path)   # chained URLs too
            text = fs.cat_file(inner)     # one request
        else:
            with open(json_path.removeprefix("file://"), "rb") as f:
                text = f.read()
    except FileNotFoundError:
        raise FileNotFoundError(
            f"{path} is not a finished dataset: it has no {DATASET_JSON} "
            "(the job writes it last; is the job still running, or did it fail?)") from None
    return DatasetSpec.from_json(text, source=json_path)
