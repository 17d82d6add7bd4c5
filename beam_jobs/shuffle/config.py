"""How a run's windows become shards: the shuffle's config, sized from the flags and the
source's estimate of its bytes."""
from __future__ import annotations

import dataclasses
import math
from typing import Optional

from beam_jobs.core.configs import ShardsConfig
from readers.format.windows import Window

SHUFFLE_MODES = ("spill", "group", "place")
MIB = 2**20


@dataclasses.dataclass(frozen=True, kw_only=True)
class ShuffleConfig:
    """How a run's examples become shards."""
    splits: tuple[str, ...]
    compression: str = "none"
    num_shards: Optional[int] = None     # per split; None: one per `shard_bytes`
    shard_bytes: int = 200 * MIB
    num_buckets: int = 1                 # key-range buckets per split
    spill_bytes: int = 32 * MIB          # spill mode: what one worker buffers
    mode: str = "spill"                  # or "group"
    bucket_bytes: int = 128 * MIB        # group mode: what a bucket task sorts in memory

    @classmethod
    def for_run(cls, shards: ShardsConfig, windows: Window,
                stored_bytes: float) -> ShuffleConfig:
        """The flags' config. The shuffle's buckets are sized so that one sorted bucket
        is about --shuffle_bucket_mb, with no cap: their count grows with the data, a
        bucket's size does not."""
        return cls(splits=tuple(shards.splits), compression=shards.compression,
                   num_shards=shards.num_shards,
                   shard_bytes=max(1, int(shards.shard_size_mb * MIB)),
                   num_buckets=max(1, math.ceil(1.1 * output_bytes(windows, stored_bytes)
                                                / (shards.shuffle_bucket_mb * MIB))),
                   spill_bytes=max(1, int(shards.spill_buffer_mb * MIB)),
                   mode=shards.shuffle, bucket_bytes=max(1, int(shards.shuffle_bucket_mb * MIB)))


def output_bytes(windows: Window, stored_bytes: float) -> float:
    """The windows' bytes, estimated from the input's (`stored_bytes`: its frames as
    windows store them): overlapping windows store a frame window / stride times."""
    return stored_bytes * max(1.0, windows.length / windows.stride)


# FnApiRunner's GroupByKey holds its whole input in memory: about 0.75 GB plus 5x the
# bytes grouped (docs/dataflow.md).
GROUP_IN_MEMORY_BASE, GROUP_IN_MEMORY_FACTOR = 0.75 * 2**30, 5


def group_memory(windows: Window, stored_bytes: float) -> float:
    """The bytes --shuffle group needs on a local runner, whose GroupByKey is in memory."""
    return GROUP_IN_MEMORY_BASE + GROUP_IN_MEMORY_FACTOR * output_bytes(windows, stored_bytes)
