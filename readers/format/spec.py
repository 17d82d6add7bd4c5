"""dataset.json: what a dataset holds (`DatasetSpec`: its features, splits and their
shards, statistics, runs), written and read back, and `load_spec`, which reads it (numpy
only: local paths, or any fsspec scheme).

A reader trusts dataset.json only once `DatasetSpec.from_json` has checked it
(spec_checks.py: its structure, every file name in it a plain name of its kind, so that
no reader leaves the dataset's directory, each feature's dtype and shape one its
encoding holds, and an example no larger than a protobuf can be); `SpecError` says what
is wrong otherwise.
`DatasetSpec.check_shard` checks a shard's size against its records, so that nothing is
allocated by a shape the files cannot hold.
"""
from __future__ import annotations

import dataclasses
import functools
import json
import os
from typing import Any, Mapping, Optional, Union

from readers.format.channel_stats import ChannelStats
from readers.format.features import FeatureSpec
from readers.format.generations import Generation, generations_of
from readers.format.json_checks import Bad, DuplicateKey, no_constants, no_duplicate_keys
from readers.format.locations import is_remote
from readers.format.names import DATASET_JSON, SIDECAR_KINDS, tf_compression_type
from readers.format.spec_checks import parse
from readers.format.splits import Shard, SplitInfo
from readers.format.tfrecord import FRAME_OVERHEAD
from readers.format.versions import FORMAT_VERSION
from readers.format.windows import Window

MASK_MEANING = {"1": "a real frame of the video",
                "0": "padding past the video's end, or a bad frame (missing or "
                     "undecodable): its values are zeros and its label 0"}


@dataclasses.dataclass(frozen=True)
class DatasetSpec:
    """The contents of dataset.json."""
    window: Window
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
        """dataset.json's text: strict JSON, no NaN or Infinity (from_json refuses them;
        ValueError here rather than a dataset no reader opens)."""
        return json.dumps({
            "format_version": self.format_version,
            "job_version": self.job_version,
            "input_kind": self.input_kind,
            "window": self.window.to_json(),
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
        }, indent=2, sort_keys=False, allow_nan=False) + "\n"

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
                           object_pairs_hook=no_duplicate_keys, parse_constant=no_constants)
        except DuplicateKey as e:
            raise SpecError(f"{source}: {e}") from None
        except (ValueError, RecursionError) as e:
            raise SpecError(f"{source}: not JSON ({e})") from None
        try:
            return cls(**parse(d))
        except Bad as e:
            raise SpecError(f"{source}: {e}") from None


class SpecError(ValueError):
    """A dataset.json that no reader can trust, with the file and what is wrong. A
    ValueError, so that whoever refuses a bad dataset.json can catch that."""


# How many bytes of records a byte of shard can hold: deflate's largest ratio is 1032:1.
_EXPANSION = {"none": 1, "gzip": 1032}
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
    before dataset.json recorded sizes), `table` only where it has one (format 6 on), and
    its CRC from format 7 on."""
    d = dataclasses.asdict(shard)
    for optional in ("bytes", "table", "table_crc32c"):
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
