"""The names of a dataset's files: dataset.json, the sidecars, the TFDS files, the shards,
their indexes and their window tables."""
from __future__ import annotations

import re
from typing import Optional

DATASET_JSON = "dataset.json"
FAILURES_JSONL = "failures.jsonl"
BAD_FRAMES_JSONL = "bad_frames.jsonl"
VIDEOS_JSONL = "videos.jsonl"
# The sidecars' plain names, those of datasets before format 5; since 5 each carries the
# run id of the commit that wrote it (`sidecar_name`), so a commit never writes over the
# sidecars of the dataset dataset.json names until dataset.json names its own.
SIDECARS = (FAILURES_JSONL, BAD_FRAMES_JSONL, VIDEOS_JSONL)
SIDECAR_KINDS = ("videos", "failures", "bad_frames")
# What TensorFlow Datasets reads beside the shards (readers.format.tfds_info): names TFDS
# fixes. Since format 5 only dataset_info.json, the features inside it.
DATASET_INFO_JSON = "dataset_info.json"
FEATURES_JSON = "features.json"
TFDS_FILES = (DATASET_INFO_JSON, FEATURES_JSON)

_SUFFIX = {"none": ".tfrecord", "gzip": ".tfrecord.gz"}
_TF_COMPRESSION = {"none": "", "gzip": "GZIP"}

COMPRESSIONS = tuple(_SUFFIX)
MAX_SHARDS = 99_999   # shard names number them in five digits
RUN_ID = re.compile(r"^[0-9a-f]{12}$")   # a run's id: its shards' names end with it
_SHARD_NAME = re.compile(
    r"(?P<split>[A-Za-z0-9_]+)-[0-9]{5}-of-[0-9]{5}(-(?P<run>[0-9a-f]{12}))?\.tfrecord(\.gz)?")
INDEX_SUFFIX = ".index"
TABLE_SUFFIX = ".table"   # the window table beside a shard (readers.format.window_table)
_SIDECAR_NAME = re.compile(r"(?P<kind>videos|failures|bad_frames)(-(?P<run>[0-9a-f]{12}))?\.jsonl")


def shard_name(split: str, index: int, num_shards: int, compression: str,
               run_id: str = "") -> str:
    """`train-00000-of-00004-RUNID.tfrecord`: each run's shards have their own names, so
    a new run never writes over the files of the dataset it replaces. Names without a
    run id are those of datasets written before."""
    run = f"-{run_id}" if run_id else ""
    return f"{split}-{index:05d}-of-{num_shards:05d}{run}{_SUFFIX[compression]}"


def is_shard_name(name: str, split: Optional[str] = None) -> bool:
    """Whether `name` is a shard's plain name (of `split`, when given): nothing else is
    ever one, and a reader opens no other (no `../x`, no absolute path)."""
    match = _SHARD_NAME.fullmatch(name) if isinstance(name, str) else None
    return match is not None and split in (None, match["split"])


def run_id_of(shard: str) -> Optional[str]:
    """The run id a shard's name carries, None for names of datasets written before."""
    match = _SHARD_NAME.fullmatch(shard)
    return match and match["run"]


def without_run_id(shard: str) -> str:
    """A shard's name without the run id it carries (`train-00000-of-00004.tfrecord`):
    the same in every run of the same inputs. Any other name as it is."""
    match = _SHARD_NAME.fullmatch(shard)
    if not (match and match["run"]):
        return shard
    start, end = match.span("run")
    return shard[:start - 1] + shard[end:]


def shard_suffix(compression: str) -> str:
    return _SUFFIX[compression]


def index_name(shard: str) -> str:
    """The offset index beside an uncompressed shard (readers.format.index)."""
    return shard + INDEX_SUFFIX


def is_index_name(name: str) -> bool:
    return (isinstance(name, str) and name.endswith(INDEX_SUFFIX)
            and is_shard_name(name[:-len(INDEX_SUFFIX)]))


def table_name(shard: str) -> str:
    """The window table beside a shard (readers.format.window_table), format 6 on."""
    return shard + TABLE_SUFFIX


def is_table_name(name: str) -> bool:
    return (isinstance(name, str) and name.endswith(TABLE_SUFFIX)
            and is_shard_name(name[:-len(TABLE_SUFFIX)]))


def sidecar_name(kind: str, run_id: str) -> str:
    """`videos-RUNID.jsonl`: the sidecar of `kind` (one of SIDECAR_KINDS) a run commits."""
    if kind not in SIDECAR_KINDS:
        raise ValueError(f"no sidecar {kind!r}")
    return f"{kind}-{run_id}.jsonl"


def is_sidecar_name(name: str) -> bool:
    """A sidecar's name: a plain one (format 4 and before) or one with a run id."""
    return isinstance(name, str) and bool(_SIDECAR_NAME.fullmatch(name))


def run_id_in(name: str) -> Optional[str]:
    """The run id a dataset file's name carries (a shard, its index or table, a sidecar),
    or None: such a file is that run's and no other's."""
    if is_index_name(name):
        name = name[:-len(INDEX_SUFFIX)]
    elif is_table_name(name):
        name = name[:-len(TABLE_SUFFIX)]
    match = (_SHARD_NAME.fullmatch(name) or _SIDECAR_NAME.fullmatch(name)
             if isinstance(name, str) else None)
    return match and match["run"]


def is_dataset_file(name: str) -> bool:
    """Whether `name` may be a file of a dataset, listed in dataset.json's `files`: a
    shard, an index, a window table, a side file or a TFDS file, by its plain name."""
    return (is_sidecar_name(name) or name in TFDS_FILES or is_shard_name(name)
            or is_index_name(name) or is_table_name(name))


def tf_compression_type(compression: str) -> str:
    """The `compression_type` argument of `tf.data.TFRecordDataset` for a dataset."""
    return _TF_COMPRESSION[compression]
