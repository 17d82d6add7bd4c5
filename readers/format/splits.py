"""A split of dataset.json: its counts and its shards."""
from __future__ import annotations

import dataclasses
from typing import Optional


@dataclasses.dataclass(frozen=True, order=True)
class Shard:
    """A shard as its split lists it. Ordered by file name, which numbers a run's shards
    of a split."""
    file: str
    examples: int
    index: Optional[str] = None   # its offset index (uncompressed shards only)
    bytes: Optional[int] = None   # its size (uncompressed shards; older datasets lack it)
    table: Optional[str] = None   # its window table (format 6 on; readers.format.window_table)
    table_crc32c: Optional[int] = None   # the CRC its table's header holds (format 7 on)


@dataclasses.dataclass(frozen=True)
class SplitInfo:
    videos: int
    windows: int
    skipped_short: int
    shards: tuple[Shard, ...]
    bad_frames: int = 0
    frames: int = 0
