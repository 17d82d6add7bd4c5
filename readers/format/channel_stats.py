"""A dataset's statistics per channel, as the job computes them and dataset.json keeps
them: for each split, of the `window` feature's values and of the `labels`, over each
stored frame once (a frame in two windows counts once) whose mask is 1.

A channel is the last axis of a frame's values: a latent frame [C] has C channels, a
pixel frame [H, W, 3] three (H * W values of each a frame), a label vector [C] C and a
scalar label one. Numpy only, as the rest of the format; TensorFlow and PyTorch tensors
are normalised without importing either (a tensor exists only where its library is).

dataset.json keeps per channel the count, the mean and the sum of squared deviations
from it (`m2`), in float64, with min and max: a form that merges (Chan, Golub and
LeVeque's parallel update), so that an --append merges its generation's statistics into
the dataset's without reading the old frames again. Within a run the job adds exact
sums instead (beam_jobs/core/moments.py), so that a run's figures do not depend on the
order its workers add them in.
"""
from __future__ import annotations

import dataclasses
import math
import sys
from typing import Any, Mapping, Optional

import numpy as np

from readers.format.json_checks import Bad, at, count, typed

STATS_FEATURES = ("window", "labels")   # the per-frame features with statistics
_FIELDS = ("mean", "std", "min", "max", "m2")


@dataclasses.dataclass(frozen=True, eq=False)
class ChannelStats:
    """One feature's statistics in one split, per channel (the last axis of a frame).

    `frames` stored frames were counted, each once, mask 1 only; `count` values per
    channel (frames times the values a channel has in a frame: H * W for pixels). The
    arrays are float64 [channels]; NaN where there is no value (no frame counted) or
    where the frames held NaN or Inf (kept by --allow_nonfinite), which every merge
    keeps. `std` is the population standard deviation, sqrt(m2 / count) (numpy's
    default, ddof=0).
    """
    frames: int
    count: int
    mean: np.ndarray
    m2: np.ndarray     # the sum of squared deviations from the mean: what merges
    min: np.ndarray
    max: np.ndarray

    @property
    def std(self) -> np.ndarray:
        with np.errstate(invalid="ignore", divide="ignore"):
            return np.sqrt(self.m2 / self.count) if self.count else np.full_like(self.m2,
                                                                                 np.nan)

    @property
    def channels(self) -> int:
        return len(self.mean)

    @property
    def finite(self) -> bool:
        """Whether every figure is a number: False where no frame was counted, or where
        the frames held NaN or Inf."""
        return bool(self.count) and all(np.isfinite(getattr(self, name)).all()
                                        for name in _FIELDS)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, ChannelStats):
            return NotImplemented
        return (self.frames, self.count) == (other.frames, other.count) and all(
            np.array_equal(getattr(self, name), getattr(other, name), equal_nan=True)
            for name in ("mean", "m2", "min", "max"))

    __hash__ = None   # type: ignore[assignment]  # unhashable: its arrays are mutable

    def __repr__(self) -> str:
        return (f"ChannelStats(frames={self.frames}, count={self.count}, "
                f"channels={self.channels}, mean={self.mean}, std={self.std}, "
                f"min={self.min}, max={self.max})")

    @classmethod
    def empty(cls, channels: int) -> "ChannelStats":
        nan = np.full(channels, np.nan)
        return cls(0, 0, nan, nan.copy(), nan.copy(), nan.copy())

    def merge(self, other: "ChannelStats") -> "ChannelStats":
        """The statistics of both sets of frames together (Chan et al.'s update)."""
        if not other.count or not self.count:
            one = self if self.count else other
            return dataclasses.replace(one, frames=self.frames + other.frames)
        n = self.count + other.count
        with np.errstate(invalid="ignore", over="ignore"):
            delta = other.mean - self.mean
            mean = self.mean + delta * (other.count / n)
            m2 = self.m2 + other.m2 + np.square(delta) * (self.count * (other.count / n))
        return ChannelStats(self.frames + other.frames, n, mean, m2,
                            np.minimum(self.min, other.min), np.maximum(self.max, other.max))

    def normalize(self, x: Any) -> Any:
        """(x - mean) / std per channel, broadcast over the last axis of `x`: a numpy
        array (a batch [B, L, C] of readers.numpy, a window, a frame), or a TensorFlow
        tensor (in a tf.data `map`) or a PyTorch tensor. Floats keep their dtype
        (float16, float32, float64), anything else (uint8 pixels) becomes float32. A
        channel whose std is 0 (one value throughout) is only shifted. Masked frames'
        values (zeros in the files) become -mean / std: the mask still tells them."""
        x, mean, scale = _operands(x, self.channels, self.mean, self._scale)
        return (x - mean) / scale

    def denormalize(self, y: Any) -> Any:
        """`normalize` undone: y * std + mean, per channel (a model's normalised output,
        a predicted label, back in the data's units)."""
        y, mean, scale = _operands(y, self.channels, self.mean, self._scale)
        return y * scale + mean

    @property
    def _scale(self) -> np.ndarray:
        std = self.std
        return np.where(std > 0, std, 1.0)

    def to_json(self) -> dict:
        """Its entry in dataset.json: a float64's shortest repr (read back exactly),
        null where not a number."""
        return {"frames": self.frames, "count": self.count,
                **{name: [float(v) if math.isfinite(v) else None
                          for v in getattr(self, name).tolist()] for name in _FIELDS}}


def _operands(x: Any, channels: int, *arrays: np.ndarray) -> tuple:
    """x in a float dtype, and `arrays` as constants of that dtype and kind (numpy,
    TensorFlow or PyTorch, whichever x is); ValueError when x's last axis is not
    `channels` long (where x's shape is known)."""
    _check_channels(x, channels)
    tf = sys.modules.get("tensorflow")
    if tf is not None and tf.is_tensor(x):
        return _tensorflow_operands(tf, x, arrays)
    torch = sys.modules.get("torch")
    if torch is not None and isinstance(x, torch.Tensor):
        return _torch_operands(torch, x, arrays)
    x = np.asarray(x)
    dtype = x.dtype if x.dtype.kind == "f" else np.dtype(np.float32)
    return (x.astype(dtype, copy=False), *(a.astype(dtype) for a in arrays))


def _check_channels(x: Any, channels: int) -> None:
    """ValueError when x's last axis is not `channels` long (where x's shape says it,
    and there is more than one channel)."""
    last = _last_axis(x)
    if channels > 1 and last is not None and last != channels:
        raise ValueError(f"the last axis of the values is {last} long; these statistics "
                         f"have {channels} channels (the last axis of a frame)")


def _tensorflow_operands(tf: Any, x: Any, arrays: tuple[np.ndarray, ...]) -> tuple:
    """A tensor in a float dtype (float32 unless it is one) and `arrays` as constants of
    that dtype."""
    dtype = x.dtype if x.dtype.is_floating else tf.float32
    return (tf.cast(x, dtype), *(tf.constant(a, dtype) for a in arrays))


def _torch_operands(torch: Any, x: Any, arrays: tuple[np.ndarray, ...]) -> tuple:
    """A PyTorch tensor in a float dtype (float32 unless it is one) and `arrays` as
    tensors of that dtype on its device."""
    dtype = x.dtype if x.is_floating_point() else torch.float32
    return (x.to(dtype), *(torch.as_tensor(a, dtype=dtype, device=x.device)
                           for a in arrays))


def _last_axis(x: Any) -> Optional[int]:
    """The length of x's last axis where its shape says it, else None."""
    try:
        shape = tuple(x.shape)
    except (AttributeError, TypeError, ValueError):   # no shape, or a rank tf does not know
        return None
    return None if not shape or shape[-1] is None else int(shape[-1])


def frame_layout(shape: tuple[int, ...]) -> tuple[int, int]:
    """(channels, values of a channel in a frame) of a frame of `shape` (a window
    feature's shape without its length): [C] -> (C, 1), [H, W, 3] -> (3, H * W), a
    scalar -> (1, 1)."""
    if not shape:
        return 1, 1
    return shape[-1], math.prod(shape[:-1])


def stats_shapes(features: Any) -> dict[str, tuple[int, ...]]:
    """{name: a frame's shape} of the features that have statistics (STATS_FEATURES
    among `features`, FeatureSpecs)."""
    return {f.name: tuple(f.shape[1:]) for f in features if f.name in STATS_FEATURES}


def empty_stats(features: Any) -> dict[str, ChannelStats]:
    """One split's statistics before any frame: each feature's, of no value."""
    return {name: ChannelStats.empty(frame_layout(shape)[0])
            for name, shape in stats_shapes(features).items()}


def merge_stats(a: Mapping[str, Mapping[str, ChannelStats]],
                b: Mapping[str, Mapping[str, ChannelStats]]
                ) -> dict[str, dict[str, ChannelStats]]:
    """Per split and feature, both merged (new dicts); a split or feature only one has,
    as it is."""
    merged = {split: dict(features) for split, features in a.items()}
    for split, features in b.items():
        into = merged.setdefault(split, {})
        for name, stats in features.items():
            into[name] = into[name].merge(stats) if name in into else stats
    return merged


def parse_stats(value: Any, splits: Mapping[str, Any], features: Any
                ) -> dict[str, dict[str, ChannelStats]]:
    """dataset.json's `stats` (absent or null: {}, a dataset from before they were
    recorded), checked: every split of the dataset and only those, each with the
    features that have statistics, each entry's arrays one number (or null) a channel,
    its counts those of its frames, and what the arrays say consistent (m2 >= 0,
    min <= mean <= max, std = sqrt(m2 / count)); at most the split's frames that are
    not bad."""
    if value is None:
        return {}
    typed(value, dict, "stats")
    if set(value) != set(splits):
        raise Bad(f"stats: splits {sorted(value)}, where dataset.json's are {sorted(splits)}")
    shapes = stats_shapes(features)
    parsed = {}
    for split, entry in value.items():
        where = at("stats", split)
        typed(entry, dict, where)
        if set(entry) != set(shapes):
            raise Bad(f"{where}: features {sorted(entry)}, where those with statistics "
                      f"are {sorted(shapes)}")
        good = splits[split].frames - splits[split].bad_frames
        parsed[split] = {name: _parse_entry(entry[name], at(where, name), shapes[name], good)
                         for name in shapes}
    return parsed


def _parse_entry(d: Any, where: str, shape: tuple[int, ...], good: int) -> ChannelStats:
    """One feature's entry in a split whose frames, less its bad ones, are `good`."""
    typed(d, dict, where)
    channels, per_frame = frame_layout(shape)
    frames, n = count(d, "frames", where), count(d, "count", where)
    if frames > good:
        raise Bad(f"{at(where, 'frames')}: {frames}, more than the split's {good} frames "
                  "that are not bad")
    if n != frames * per_frame:
        raise Bad(f"{at(where, 'count')}: {n}, not {frames} frames of {per_frame} value"
                  f"{'s' * (per_frame != 1)} a channel")
    arrays = {name: _floats(d, name, where, channels) for name in _FIELDS}
    stats = ChannelStats(frames, n, arrays["mean"], arrays["m2"], arrays["min"],
                         arrays["max"])
    if not n:
        if not all(np.isnan(a).all() for a in arrays.values()):
            raise Bad(f"{where}: numbers for no value (count 0); they must be null")
        return stats
    with np.errstate(invalid="ignore"):
        tolerance = 1e-9 * np.maximum(np.abs(stats.min), np.abs(stats.max))
        wrong = [name for name, bad in (
            ("m2", arrays["m2"] < 0), ("min", arrays["min"] > arrays["max"]),
            ("mean", (arrays["mean"] < arrays["min"] - tolerance)
             | (arrays["mean"] > arrays["max"] + tolerance)),
            ("std", ~np.isclose(arrays["std"], stats.std, rtol=1e-12, atol=0,
                                equal_nan=True))) if bad.any()]
    if wrong:
        raise Bad(f"{at(where, wrong[0])}: not consistent with the other figures "
                  "(m2 >= 0, min <= mean <= max, std = sqrt(m2 / count))")
    return stats


def _floats(d: Mapping, key: str, where: str, length: int) -> np.ndarray:
    """d[key]: `length` numbers or nulls (NaN), as float64."""
    values = typed(d.get(key), list, at(where, key))
    if len(values) != length:
        raise Bad(f"{at(where, key)}: {len(values)} values, one a channel is {length}")
    for i, v in enumerate(values):
        if v is not None and (type(v) not in (int, float)):
            raise Bad(f"{at(at(where, key), i)}: {v!r} is not a number or null")
    return np.array([np.nan if v is None else v for v in values], np.float64)

