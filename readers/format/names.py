"""The names of a dataset's files: dataset.json, the sidecars, the shards and their indexes."""
from __future__ import annotations

import re

DATASET_JSON = "dataset.json"
FAILURES_JSONL = "failures.jsonl"
BAD_FRAMES_JSONL = "bad_frames.jsonl"
VIDEOS_JSONL = "videos.jsonl"

_SUFFIX = {"none": ".tfrecord", "gzip": ".tfrecord.gz"}
_TF_COMPRESSION = {"none": "", "gzip": "GZIP"}

COMPRESSIONS = tuple(_SUFFIX)
MAX_SHARDS = 99_999   # shard names number them in five digits
RUN_ID = re.compile(r"^[0-9a-f]{12}$")   # a run's id: its shards' names end with it
_SHARD_NAME = re.compile(r"^[A-Za-z0-9_]+-\d{5}-of-\d{5}(-[0-9a-f]{12})?\.tfrecord(\.gz)?$")
INDEX_SUFFIX = ".index"


def shard_name(split: str, index: int, num_shards: int, compression: str,
               run_id: str = "") -> str:
    """`train-00000-of-00004-RUNID.tfrecord`: each run's shards have their own names, so
    a new run never writes over the files of the dataset it replaces. Names without a
    run id are those of datasets written before."""
    run = f"-{run_id}" if run_id else ""
    return f"{split}-{index:05d}-of-{num_shards:05d}{run}{_SUFFIX[compression]}"


def is_shard_name(name: str) -> bool:
    return bool(_SHARD_NAME.match(name))


def index_name(shard: str) -> str:
    """The offset index beside an uncompressed shard (readers.format.index)."""
    return shard + INDEX_SUFFIX


def is_index_name(name: str) -> bool:
    return name.endswith(INDEX_SUFFIX) and is_shard_name(name[:-len(INDEX_SUFFIX)])


def tf_compression_type(compression: str) -> str:
    """The `compression_type` argument of `tf.data.TFRecordDataset` for a dataset."""
    return _TF_COMPRESSION[compression]
