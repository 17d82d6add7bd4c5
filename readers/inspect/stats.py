"""`readers.inspect --stats`: the statistics the job recorded in dataset.json (exact, per
channel; `recorded`), then per-feature statistics of a split's windows read through
tf.data, over a sample or all of them (`stats`)."""
from __future__ import annotations

import collections
import dataclasses
from typing import Any, Iterable, Optional

import numpy as np

from readers import format as data_format

MAX_CHANNELS = 16   # channels a table of `recorded` lists, the first (all are in dataset.json)
NONE_RECORDED = ("statistics: none in dataset.json (a job before they were recorded wrote "
                 "it, or an --append to such a dataset; rebuild to have them)")


def _numeric(values: np.ndarray) -> bool:
    return values.dtype.kind in "fiu"


@dataclasses.dataclass
class _Moments:
    """A numeric feature's running statistics over the windows read so far: its finite
    values' count, sum, sum of squares, min and max, and its NaN and Inf counted apart."""
    count: int = 0
    total: float = 0.0
    squares: float = 0.0
    low: float = np.inf
    high: float = -np.inf
    nans: int = 0
    infs: int = 0

    def add(self, values: np.ndarray) -> None:
        self.nans += int(np.isnan(values).sum())
        self.infs += int(np.isinf(values).sum())
        values = values[np.isfinite(values)]
        if values.size:
            self.count += values.size
            self.total += values.sum()
            self.squares += np.square(values).sum()
            self.low, self.high = min(self.low, values.min()), max(self.high, values.max())

    @property
    def mean(self) -> float:
        return self.total / self.count if self.count else float("nan")

    @property
    def std(self) -> float:
        if not self.count:
            return float("nan")
        return float(np.sqrt(max(0.0, self.squares / self.count - self.mean ** 2)))


def summary_line(dataset: data_format.DatasetSpec) -> str:
    """The summary's line on the job's statistics: which there are, or that there are
    none."""
    if not dataset.stats:
        return NONE_RECORDED
    names = " and ".join(next(iter(dataset.stats.values())))
    return f"statistics: of {names}, exact, per split and channel (--stats shows them)"


def recorded(dataset: data_format.DatasetSpec, split: str) -> str:
    """The job's statistics of `split`, a table per feature (mean, std, min, max a
    channel, the first MAX_CHANNELS channels), each saying over how many frames, and
    what is not a number and why; or the one line that there are none."""
    if not dataset.stats:
        return NONE_RECORDED
    lines = [f"statistics in dataset.json, split {split} (exact: each stored frame once, "
             "mask 1; per channel, the last axis of a frame):"]
    for name, s in dataset.stats[split].items():
        head = f"  {name}: {s.frames:,} frames, {s.count:,} values a channel"
        if name == "window" and dataset.feature("window").encoding == "jpeg":
            head += " (the pixels before JPEG compression)"
        if not s.count:
            lines.append(f"{head}: none (no frame with mask 1)")
            continue
        if not s.finite:
            head += ("; NaN or null: the frames hold NaN or Inf (kept by --allow_nonfinite), "
                     "or sums past float64's range")
        lines += [head, f"    {'channel':12s} {'mean':>12s} {'std':>12s} {'min':>12s} "
                        f"{'max':>12s}"]
        names = channel_names(dataset, name, s.channels)
        lines += [f"    {names[c]:12s} {s.mean[c]:12.6g} {s.std[c]:12.6g} {s.min[c]:12.6g} "
                  f"{s.max[c]:12.6g}" for c in range(min(s.channels, MAX_CHANNELS))]
        if s.channels > MAX_CHANNELS:
            lines.append(f"    ... and {s.channels - MAX_CHANNELS} more channels (all in "
                         "dataset.json)")
    return "\n".join(lines)


def channel_names(dataset: data_format.DatasetSpec, feature: str, channels: int) -> list[str]:
    """What to call each channel: a labels CSV's header names, a pixel's R, G and B (or
    L), else its index."""
    if feature == "labels":
        names = (dataset.labels or {}).get("names") or []
    else:
        names = list(dataset.frame.get("channel_order") or "")
    return [str(n) for n in names] if len(names) == channels else [str(c) for c in
                                                                     range(channels)]


def stats(path: str, dataset: data_format.DatasetSpec, split: str, sample: Optional[int],
          seed: int) -> str:
    """Mean, std, min, max per numeric feature over `sample` windows (None: all), with
    the NaN and Inf values counted (and left out of the others), a label histogram, and
    the fraction of masked frames."""
    from readers.tfdata.dataset import make_dataset

    ds = make_dataset(path, split, batch_size=64, seed=seed, drop_remainder=False)
    moments, labels, seen = _sampled(ds, sample)
    lines = [f"statistics of {min(seen, sample or seen)} {split} windows (NaN and Inf "
             "counted apart):",
             f"  {'feature':10s} {'mean':>12s} {'std':>12s} {'min':>12s} {'max':>12s} "
             f"{'NaN':>8s} {'Inf':>8s}"]
    for name, m in moments.items():
        lines.append(f"  {name:10s} {m.mean:12.5g} {m.std:12.5g} {m.low:12.5g} "
                     f"{m.high:12.5g} {m.nans:8d} {m.infs:8d}")
    if "mask" in moments and moments["mask"].count:
        lines.append(f"masked frames: {1 - moments['mask'].mean:.2%}")
    return "\n".join(lines + _label_histogram(labels))


def _sampled(ds: Iterable[dict[str, Any]], sample: Optional[int]
             ) -> tuple[dict[str, _Moments], list[np.ndarray], int]:
    """Of the first `sample` windows of `ds`'s batches (None: all): each numeric
    feature's moments (`start` aside), the finite label values, and the windows read
    (a whole batch past `sample`)."""
    moments: dict[str, _Moments] = collections.defaultdict(_Moments)
    labels, seen = [], 0
    for batch in ds:
        for name, tensor in batch.items():
            values = tensor.numpy()
            if not _numeric(values) or name == "start":
                continue
            values = values[:None if sample is None else sample - seen].astype(np.float64)
            moments[name].add(values)
            if name == "labels":
                labels.append(values[np.isfinite(values)].reshape(-1))
        seen += len(next(iter(batch.values())))
        if sample is not None and seen >= sample:
            break
    return moments, labels, seen


def _label_histogram(labels: list[np.ndarray]) -> list[str]:
    """The label values' histogram in 10 bins, a bar a bin; none without values."""
    if not (labels and sum(map(len, labels))):
        return []
    counts, edges = np.histogram(np.concatenate(labels), bins=10)
    lines = ["label histogram:"]
    for count, low, high in zip(counts, edges, edges[1:], strict=False):
        bar = "#" * round(40 * count / max(1, counts.max()))
        lines.append(f"  [{low:10.4g}, {high:10.4g})  {count:8d}  {bar}")
    return lines
