"""The report's statistics of windows, over a fixed sample: masked frames per window,
per-frame labels, per-video metadata, latent channels; and the shuffle's quality from
the first records of shards read in order.

Every figure here is over a number of windows the command line fixes (`--report_samples`),
not over the dataset, so its time and memory do not grow with the dataset. Pixel windows
are not decoded for the statistics (their masks, labels and metadata are enough); a
latent sample is read READ_CHUNK windows at a time and summed per channel.
"""
from __future__ import annotations

import dataclasses
from typing import Optional

import numpy as np

from readers import format as data_format
from readers.report import windows as picks

MAX_VALUES = 200_000     # label values kept per label dimension for its histogram
MAX_CHANNELS = 512       # latent channels summed and plotted (the first ones)
SHUFFLE_SHARDS = 16      # shards of a split whose first records are read in order
SHUFFLE_RECORDS = 32     # records read at the start of each of them


@dataclasses.dataclass
class Sampled:
    """What a sample of windows shows."""
    windows: int = 0
    masked: Optional[np.ndarray] = None            # windows by masked frames, 0..L
    labels: list[np.ndarray] = dataclasses.field(default_factory=list)  # per dimension
    label_names: list[str] = dataclasses.field(default_factory=list)
    nonfinite: int = 0                             # NaN or Inf values left out
    metadata: dict[bytes, np.ndarray] = dataclasses.field(default_factory=dict)  # by video
    channel_mean: Optional[np.ndarray] = None      # latents: per channel, real frames
    channel_std: Optional[np.ndarray] = None
    channels: int = 0                              # of the window, before MAX_CHANNELS
    scale: tuple[float, float] = (-3.0, 3.0)       # the contact sheets' fixed colours


def sample(reader: picks.Windows, spec: data_format.DatasetSpec,
           chosen: list[tuple[str, str, int]], seed: int) -> Sampled:
    """The statistics of the windows `chosen` ((split, run, number), picks.spread)."""
    length = spec.window.length
    latent = not picks.is_pixels(spec)
    features = _features_read(spec, latent)
    out = Sampled(masked=np.zeros(length + 1, np.int64), label_names=_label_names(spec))
    label_values: list[list[np.ndarray]] = [[] for _ in out.label_names]
    moments = None
    for split, numbers in _numbers_by_split(chosen).items():
        for batch in reader.read(split, numbers, features):
            mask = batch["mask"] > 0
            _count_batch(out, label_values, batch, mask, length)
            if latent:
                moments = _add_channels(moments, batch["window"], mask)
                out.channels = batch["window"].shape[-1] if batch["window"].ndim > 2 else 1
    out.labels = _label_samples(label_values, seed)
    if moments is not None and moments[0].max() > 0:
        out.channel_mean, out.channel_std, out.scale = _channel_statistics(moments)
    return out


def _features_read(spec: data_format.DatasetSpec, latent: bool) -> list[str]:
    """The features the statistics need: mask and video id, labels and metadata where
    there are, and the latent windows (pixel windows are not decoded)."""
    features = ["mask", "video_id"] + [f.name for f in spec.features
                                       if f.name in ("labels", "metadata")]
    return features + (["window"] if latent else [])


def _label_names(spec: data_format.DatasetSpec) -> list[str]:
    """A name per label dimension: dataset.json's, or "label i"; none without labels."""
    label_feature = picks.optional(spec, "labels")
    if label_feature is None:
        return []
    dims = int(np.prod(label_feature.shape[1:]))
    names = (spec.labels or {}).get("names") or [f"label {i}" for i in range(dims)]
    return [str(n) for n in names][:dims]


def _numbers_by_split(chosen: list[tuple[str, str, int]]) -> dict[str, list[int]]:
    """The window numbers of `chosen` per split, in their order."""
    by_split: dict[str, list[int]] = {}
    for split, _, number in chosen:
        by_split.setdefault(split, []).append(number)
    return by_split


def _count_batch(out: Sampled, label_values: list[list[np.ndarray]],
                 batch: dict[str, np.ndarray], mask: np.ndarray, length: int) -> None:
    """Adds a batch of windows to `out` (windows, masked frames, NaN or Inf labels left
    out, each video's first metadata) and, per label dimension, its finite values on
    real frames to `label_values`."""
    out.windows += len(mask)
    if out.masked is None:   # (sample starts it at zeros)
        out.masked = np.zeros(length + 1, np.int64)
    out.masked += np.bincount(length - mask.sum(1), minlength=length + 1)
    if "labels" in batch:
        values = batch["labels"].reshape(*mask.shape, -1)[mask]
        for d, kept in enumerate(label_values):
            column = values[:, d]
            out.nonfinite += int((~np.isfinite(column)).sum())
            kept.append(column[np.isfinite(column)])
    if "metadata" in batch:
        for video, row in zip(batch["video_id"], batch["metadata"], strict=True):
            out.metadata.setdefault(bytes(video), row)


def _label_samples(label_values: list[list[np.ndarray]], seed: int) -> list[np.ndarray]:
    """Per label dimension, its values: at most MAX_VALUES of them, drawn from `seed`."""
    rng = np.random.default_rng([seed, 3])
    samples = []
    for kept in label_values:
        values = np.concatenate(kept) if kept else np.zeros(0, np.float32)
        if len(values) > MAX_VALUES:
            values = rng.choice(values, MAX_VALUES, replace=False)
        samples.append(values)
    return samples


def _channel_statistics(moments: tuple[np.ndarray, np.ndarray, np.ndarray]
                        ) -> tuple[np.ndarray, np.ndarray, tuple[float, float]]:
    """From the per-channel count, sum and sum of squares: each channel's mean and
    standard deviation, and the contact sheets' colour scale, the pooled mean +- 3
    pooled standard deviations (+- 1 when they are 0)."""
    count, total, squares = moments
    mean = total / np.maximum(count, 1)
    std = np.sqrt(np.maximum(squares / np.maximum(count, 1) - mean ** 2, 0))
    pooled_mean = total.sum() / count.sum()
    pooled_std = float(np.sqrt(max(squares.sum() / count.sum() - pooled_mean ** 2, 0)))
    spread = 3 * pooled_std or 1.0
    return mean, std, (float(pooled_mean - spread), float(pooled_mean + spread))


def _add_channels(moments: Optional[tuple], windows: np.ndarray, mask: np.ndarray
                  ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per channel (the last axis; all of a frame's values when a frame is a vector):
    the count, sum and sum of squares of the finite values of real frames."""
    frames = windows[mask].astype(np.float64)           # [real frames, *frame shape]
    channels = frames.shape[-1] if frames.ndim > 1 else 1
    values = frames.reshape(-1, channels)[:, :MAX_CHANNELS]
    finite = np.isfinite(values)
    values = np.where(finite, values, 0.0)
    step = (finite.sum(0), values.sum(0), np.square(values).sum(0))
    if moments is None:
        return step
    return tuple(a + b for a, b in zip(moments, step, strict=True))


@dataclasses.dataclass(frozen=True)
class ShardOrder:
    """Of one shard's first records read in order: neighbouring pairs, and how many of
    them are two windows of one video."""
    file: str
    pairs: int
    same: int

    @property
    def share(self) -> float:
        return self.same / self.pairs if self.pairs else 0.0


def shuffle_order(path: str, spec: data_format.DatasetSpec) -> dict[str, list[ShardOrder]]:
    """Per split, SHUFFLE_RECORDS records at the start of up to SHUFFLE_SHARDS shards
    (evenly over the split), their video ids compared with the next one's."""
    found: dict[str, list[ShardOrder]] = {}
    for name, split in spec.splits.items():
        found[name] = []
        for shard in picks.head_shards(split, SHUFFLE_SHARDS):
            ids = picks.heads(path, spec, shard, SHUFFLE_RECORDS, ["video_id"])["video_id"]
            same = int(sum(a == b for a, b in zip(ids, ids[1:], strict=False)))
            found[name].append(ShardOrder(shard.file, max(len(ids) - 1, 0), same))
    return found
