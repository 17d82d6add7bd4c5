"""How a run cuts its videos: where windows start, which split a video goes to and where
each window sorts (`CutConfig`), and how often the cut says how far it got."""
from __future__ import annotations

import dataclasses
from typing import Mapping, Optional

from readers.format import keys
from readers.format.windows import Window


@dataclasses.dataclass(frozen=True)
class CutConfig:
    """Where windows start, which split a video goes to, and where a window sorts."""
    windows: Window
    splits: Mapping[str, float]
    seed: int = 0

    def key(self, video_id: str, start: int) -> int:
        return keys.window_key(self.seed, video_id, start)

    def split_of(self, video) -> str:
        return video.split or keys.assign_split(self.seed, video.video_id, self.splits)


@dataclasses.dataclass(frozen=True)
class ProgressConfig:
    """How often each worker's cut logs its progress, and of how many videos."""
    total_videos: Optional[int] = None
    workers: int = 1
    interval: float = 10.0
