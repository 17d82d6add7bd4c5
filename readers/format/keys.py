"""Stable hashes: which split a video goes to, and where a window sorts in its split.

Python's `hash` differs between processes; these are the same on every worker and run.
"""
from __future__ import annotations

import hashlib
import re
from typing import Mapping

_SPLIT_NAME = re.compile(r"^[A-Za-z0-9_]+$")


def stable_hash(*parts: object) -> int:
    """A 64-bit unsigned hash of the parts' string forms."""
    text = "\x1f".join(str(p) for p in parts).encode("utf-8")
    return int.from_bytes(hashlib.blake2b(text, digest_size=8).digest(), "big")


def window_key(seed: int, video_id: str, start: int) -> int:
    """The sort key that shuffles a split's windows: uniform over [0, 2**64)."""
    return stable_hash("window", seed, video_id, start)


def parse_splits(text: str) -> dict[str, float]:
    """'train=0.9,validation=0.1' -> {'train': 0.9, 'validation': 0.1}; ValueError if malformed."""
    splits: dict[str, float] = {}
    for part in text.split(","):
        name, sep, fraction = part.strip().partition("=")
        name = name.strip()
        if not sep or not _SPLIT_NAME.match(name):
            raise ValueError(f"expected name=fraction pairs like train=0.9,validation=0.1, "
                             f"got {part.strip()!r}")
        if name in splits:
            raise ValueError(f"split {name!r} is given twice")
        try:
            value = float(fraction)
        except ValueError:
            raise ValueError(f"fraction of split {name!r} is not a number: {fraction!r}") from None
        if not 0 < value <= 1:
            raise ValueError(f"fraction of split {name!r} must be in (0, 1], got {value}")
        splits[name] = value
    total = sum(splits.values())
    if abs(total - 1) > 1e-6:
        raise ValueError(f"split fractions must sum to 1, got {total:g}")
    return splits


def assign_split(seed: int, video_id: str, splits: Mapping[str, float]) -> str:
    """The split of a video, by a hash of (seed, video id): all its windows go there."""
    point = stable_hash("split", seed, video_id) / 2.0 ** 64
    cumulative = 0.0
    for name, fraction in splits.items():
        cumulative += fraction
        if point < cumulative:
            return name
    return name  # rounding left the point just above the last boundary
