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
sums instead (readers/format/moments.py), so that a run's figures do not depend on the
order its workers add them in.
"""
from __future__ import annotations

import dataclasses
import functools
import math
import sys
from typing import Any, Callable, Mapping, Optional

import numpy as np

from readers.format.json_checks import Bad, at, count, shown, typed

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
    default, ddof=0). `channel_axis`: whether a frame's values have a channel axis, their
    last (False for scalar frames, a label [L]: their one channel's figures apply to
    values of any shape); `normalize` checks the values' last axis where there is one.
    """
    frames: int
    count: int
    mean: np.ndarray
    m2: np.ndarray     # the sum of squared deviations from the mean: what merges
    min: np.ndarray
    max: np.ndarray
    channel_axis: bool = True

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
    def empty(cls, channels: int, channel_axis: bool = True) -> "ChannelStats":
        nan = np.full(channels, np.nan)
        return cls(0, 0, nan, nan.copy(), nan.copy(), nan.copy(), channel_axis)

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
                            np.minimum(self.min, other.min), np.maximum(self.max, other.max),
                            self.channel_axis)

    def normalize(self, x: Any) -> Any:
        """(x - mean) / std per channel, broadcast over the last axis of `x`: a numpy
        array (a batch [B, L, C] of readers.numpy, a window, a frame), or a TensorFlow
        tensor (in a tf.data `map`) or a PyTorch tensor. Computed in float32 or wider:
        float64 (and numpy's wider floats) keep their dtype, anything else (uint8 pixels,
        float16 and bfloat16 latents) becomes float32, whose range a small std needs. A
        channel whose std is 0 (one value throughout), or so small that it is 0 in the
        dtype computed in, is only shifted: x - mean, never inf or NaN. Masked frames'
        values (zeros in the files) become -mean / std: the mask still tells them.
        ValueError when x's last axis is not `channels` long (where x's shape says it and
        the frames have a channel axis)."""
        x, mean, scale = _operands(x, self)
        return (x - mean) / scale

    def denormalize(self, y: Any) -> Any:
        """`normalize` undone: y * std + mean, per channel (a model's normalised output,
        a predicted label, back in the data's units), in the same dtype."""
        y, mean, scale = _operands(y, self)
        return y * scale + mean

    def to_json(self) -> dict:
        """Its entry in dataset.json: a float64's shortest repr (read back exactly),
        null where not a number."""
        return {"frames": self.frames, "count": self.count,
                **{name: [float(v) if math.isfinite(v) else None
                          for v in getattr(self, name).tolist()] for name in _FIELDS}}


def _operands(x: Any, stats: ChannelStats) -> tuple:
    """(x, mean, scale) to normalise with: x in the dtype to compute in (`_computed_in`),
    and `stats`' mean and std as constants of that dtype and kind, a std that is 0 in
    that dtype 1 (only shifted). ValueError when x's last axis does not hold the
    channels."""
    _check_channels(x, stats)
    x, dtype, constant = _computed_in(x)
    scale: np.ndarray = stats.std.astype(dtype)
    scale[~(scale > 0)] = 1     # 0, or NaN (not a number: the mean is NaN too)
    return x, constant(stats.mean.astype(dtype)), constant(scale)


def _computed_in(x: Any) -> tuple[Any, Any, Callable[[np.ndarray], Any]]:
    """(x in float32 or wider, that dtype as numpy's, a numpy array -> a constant of
    x's kind): float64 (and numpy's wider floats) as they are, anything else float32,
    for numpy, a TensorFlow tensor or a PyTorch tensor (on its device)."""
    tf = sys.modules.get("tensorflow")
    if tf is not None and tf.is_tensor(x):
        dtype = tf.float64 if x.dtype == tf.float64 else tf.float32
        return tf.cast(x, dtype), dtype.as_numpy_dtype, functools.partial(tf.constant,
                                                                          dtype=dtype)
    torch = sys.modules.get("torch")
    if torch is not None and isinstance(x, torch.Tensor):
        wide = torch.float64 if x.dtype == torch.float64 else torch.float32
        return (x.to(wide), np.float64 if wide == torch.float64 else np.float32,
                functools.partial(torch.as_tensor, dtype=wide, device=x.device))
    x = np.asarray(x)
    dtype = np.promote_types(x.dtype, np.float32) if x.dtype.kind == "f" else np.float32
    return x.astype(dtype, copy=False), dtype, np.asarray


def _check_channels(x: Any, stats: ChannelStats) -> None:
    """ValueError when x's last axis is not `stats`' channels long (where x's shape says
    it, and its frames have a channel axis)."""
    last = _last_axis(x)
    if stats.channel_axis and last is not None and last != stats.channels:
        raise ValueError(f"the last axis of the values is {last} long; these statistics "
                         f"have {stats.channels} channel{'s' * (stats.channels != 1)} (the "
                         "last axis of a frame)")


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
    return {name: ChannelStats.empty(frame_layout(shape)[0], channel_axis=bool(shape))
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
    features that have statistics, each entry's arrays one finite number (or null) a
    channel, its counts those of its frames, and what the arrays say consistent
    (`_check_consistent`); at most the split's frames that are not bad."""
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
    if not n:
        if not all(np.isnan(a).all() for a in arrays.values()):
            raise Bad(f"{where}: numbers for no value (count 0); they must be null")
    else:
        _check_consistent(arrays, n, where)
    return ChannelStats(frames, n, arrays["mean"], arrays["m2"], arrays["min"],
                        arrays["max"], channel_axis=bool(shape))


# Where the job writes null, a figure that depends on it is null too: min or max null
# (NaN or Inf among the values), so is the mean; the mean null, so is m2 (m2 null alone:
# its sum past float64's range); std is null exactly where m2 is.
_NULL_FOLLOWS = (("min", "mean"), ("max", "mean"), ("mean", "m2"), ("m2", "std"),
                 ("std", "m2"))
# How far a figure may stray from another by rounding, relative: the job's are within
# about 1e-12 (readers/format/moments.py); the rest is room for another writer's.
RELATIVE_TOLERANCE = 1e-9


def _check_consistent(arrays: dict[str, np.ndarray], n: int, where: str) -> None:
    """Bad naming the first figure of a counted entry (`n` values a channel) that the
    others make impossible: a number beside a null it depends on (_NULL_FOLLOWS), m2 < 0,
    min > max, a mean outside [min, max], m2 / count past Popoviciu's bound on a
    variance, ((max - min) / 2)**2, or std not sqrt(m2 / count). The last three within
    RELATIVE_TOLERANCE: of max(|min|, |max|) for the mean, of its square for the
    variance, of sqrt(m2 / count) for std."""
    for null, then in _NULL_FOLLOWS:
        _refuse(np.isnan(arrays[null]) & ~np.isnan(arrays[then]), where, then,
                f"a number where {null}[{{c}}] is null")
    mean, m2, low, high, std = (arrays[name] for name in ("mean", "m2", "min", "max", "std"))
    with np.errstate(invalid="ignore", over="ignore"):    # NaN compares False: no check
        largest = np.maximum(np.abs(low), np.abs(high))
        slack = RELATIVE_TOLERANCE * largest
        variance = m2 / n
        for wrong, field, said in (
                (m2 < 0, "m2", "less than 0"), (low > high, "min", "more than max[{c}]"),
                ((mean < low - slack) | (mean > high + slack), "mean",
                 "outside [min[{c}], max[{c}]]"),
                (variance > np.square((high - low) / 2) + slack * largest, "m2",
                 "m2 / count more than ((max - min) / 2)**2, the most a variance of values "
                 "in [min, max] can be"),
                (np.abs(std - np.sqrt(variance)) > RELATIVE_TOLERANCE * np.sqrt(variance),
                 "std", "not sqrt(m2[{c}] / count)")):
            _refuse(wrong, where, field, said)


def _refuse(wrong: np.ndarray, where: str, field: str, said: str) -> None:
    """Bad naming `field`'s first channel where `wrong`, saying `said` of it ({c}: the
    channel)."""
    if wrong.any():
        c = int(np.flatnonzero(wrong)[0])
        raise Bad(f"{at(at(where, field), c)}: {said.format(c=c)}")


def _floats(d: Mapping, key: str, where: str, length: int) -> np.ndarray:
    """d[key]: `length` finite numbers or nulls (NaN), as float64."""
    values = typed(d.get(key), list, at(where, key))
    if len(values) != length:
        raise Bad(f"{at(where, key)}: {len(values)} values, one a channel is {length}")
    for i, v in enumerate(values):
        if v is not None and (type(v) not in (int, float)):
            raise Bad(f"{at(at(where, key), i)}: {v!r} is not a number or null")
        if v is not None and not _finite(v):
            raise Bad(f"{at(at(where, key), i)}: {shown(v)} is not a finite float64 (null "
                      "where a figure is not a number)")
    return np.array([np.nan if v is None else v for v in values], np.float64)


def _finite(v: float) -> bool:
    try:
        return math.isfinite(v)
    except OverflowError:      # an int past float64's range
        return False
