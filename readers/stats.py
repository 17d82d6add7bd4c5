"""`readers.inspect --stats`: per-feature statistics of a split's windows, read through
tf.data, over a sample or all of them."""
from __future__ import annotations

import collections
import dataclasses
from typing import Optional

import numpy as np

from readers import format as data_format


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


def stats(path: str, dataset: data_format.DatasetSpec, split: str, sample: Optional[int],
          seed: int) -> str:
    """Mean, std, min, max per numeric feature over `sample` windows (None: all), with
    the NaN and Inf values counted (and left out of the others), a label histogram, and
    the fraction of masked frames."""
    from readers.dataset import make_dataset

    ds = make_dataset(path, split, batch_size=64, seed=seed, drop_remainder=False)
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
    lines = [f"statistics of {min(seen, sample or seen)} {split} windows (NaN and Inf "
             "counted apart):",
             f"  {'feature':10s} {'mean':>12s} {'std':>12s} {'min':>12s} {'max':>12s} "
             f"{'NaN':>8s} {'Inf':>8s}"]
    for name, m in moments.items():
        lines.append(f"  {name:10s} {m.mean:12.5g} {m.std:12.5g} {m.low:12.5g} "
                     f"{m.high:12.5g} {m.nans:8d} {m.infs:8d}")
    if "mask" in moments and moments["mask"].count:
        lines.append(f"masked frames: {1 - moments['mask'].mean:.2%}")
    if labels and sum(map(len, labels)):
        counts, edges = np.histogram(np.concatenate(labels), bins=10)
        lines.append("label histogram:")
        for count, low, high in zip(counts, edges, edges[1:]):
            bar = "#" * round(40 * count / max(1, counts.max()))
            lines.append(f"  [{low:10.4g}, {high:10.4g})  {count:8d}  {bar}")
    return "\n".join(lines)
