"""A mixture of sources with weights, for readers.numpy: `Mixture`, one map-style dataset
over its sources' windows, and what an epoch of it is (`MixtureBatches`, one epoch's
batches of it per rank, resumable, is mixture_batches.py's). The shares of an epoch, and
the rest that the tf.data mixture (readers.tfdata.mixed_dataset) takes too, are
readers.mixing's.

    from readers.numpy import Mixture, MixtureBatches, WindowSource

    mixture = Mixture([(WindowSource("a/", "train"), 0.7),
                       (WindowSource("b/", "train"), 0.3)], seed=0)
    plan = MixtureBatches(mixture, 64, epoch=3)      # a DataLoader's sampler
    for indices in plan:
        batch = plan.source.read_batch(indices)      # batch["source"]: 0 or 1 a window

An epoch of a mixture of sources S_0..S_k-1 with weights w_i (any positive numbers,
taken relative to their sum) has N windows: `epoch_windows`, by default the sum of the
sources' lengths. Source i gives n_i of them, w_i x N rounded so that the n_i sum to N
exactly (largest remainders, ties to the earlier source): |n_i - w_i N| < 1. Source i's
n_i windows are the first n_i of a fresh permutation of its windows for the epoch, and
of further ones after it when n_i is more than it has (each a pure function of the seed,
the source's place, the epoch and its number): each window is drawn floor(n_i / len(S_i))
or ceil(n_i / len(S_i)) times an epoch, at most once where the source has windows to
spare (downsampled), at least once where it has fewer (upsampled). Rank r of R takes every
R-th of the epoch's draws (source by source), so each rank holds floor or ceil of n_i / R
of each source, within 2 windows of w_i x N / R, and the same number of windows,
floor(N / R); the N mod R draws left over are the last ones of the last source. A rank
reads its windows in an order of their own (a permutation seeded by the seed, the epoch
and the rank): a batch's shares vary around the weights, the epoch's hold.

A window's number in a mixture is its source's offset (the lengths of the sources before
it) plus its number there, so a DataLoader's workers read any batch of any epoch without
knowing the plan. Numpy only: readers.numpy imports it; the sources are used through
their public API alone (`len`, `read_batch`, `for_epoch`, `reading`, `features`, `clip`,
`float_pixels`, `keep_float16`), so a selected source mixes as a whole one.
"""
from __future__ import annotations

import copy
import math
from typing import Any, Callable, Optional, Protocol, Sequence, runtime_checkable

import numpy as np

from readers.arguments import (
    optional_whole_number,
    seed_number,
    whole_number,
    window_numbers,
)
from readers.clips import CLIP_OFFSET, clipped_shape
from readers.mixing import SOURCE, epoch_counts, refuse_empty, refuse_unlike, weight
from readers.numpy import handover, scatter

# Seed words that keep the mixture's random streams apart from each other and from
# EpochBatches' permutations (numpy's SeedSequence pads with zeros: [s] is [s, 0]).
_STREAM, _RANK = 0x6D697831, 0x6D697832


@runtime_checkable
class Source(Protocol):
    """What a mixture asks of a source: readers.numpy.WindowSource has it."""
    features: Sequence[Any]
    clip: Any
    float_pixels: bool
    keep_float16: bool

    def __len__(self) -> int: ...
    def read_batch(self, indices: Any, *, allocate: Any = None) -> dict[str, Any]: ...
    def for_epoch(self, epoch: int) -> "Source": ...
    @property
    def reading(self) -> dict[str, Any]: ...


def _signature(source: Source) -> dict[str, tuple[tuple[int, ...], str]]:
    """Feature name -> (shape, dtype) of each window `source` gives, from dataset.json
    alone (each codec's `finish` of an empty column): no record is read."""
    found = {}
    for feature in source.features:
        shape = tuple(clipped_shape(feature.name, tuple(feature.shape), source.clip))
        dtype = feature.codec.finish(np.empty((0, *shape), feature.codec.column_dtype),
                                     float_pixels=source.float_pixels,
                                     keep_float16=source.keep_float16).dtype
        found[feature.name] = (shape, "bytes" if dtype.kind == "S" else dtype.name)
    if source.clip is not None:
        found[CLIP_OFFSET] = ((), "int64")
    return found


def _described(source: Source) -> str:
    reading = source.reading
    return f"{reading.get('dataset')} split {reading.get('split')!r}"


class Mixture:
    """Sources mixed by weight: a map-style dataset (PyTorch's `Dataset`: `len`, `[i]`,
    `read_batch`, `__getitems__`) whose window numbers run through the sources in turn
    (a source's offset plus its own number), and the epochs of the mixture
    (`MixtureBatches`; the module's docstring defines them).

    Args:
      sources: (source, weight) pairs: `readers.numpy.WindowSource`s (each with its own
        path, split, features, clip, transform; a path is a TypeError in one line) and
        finite numbers > 0, relative to their sum. The features they give must agree in
        names, shapes and dtypes (after `features=`, `float_pixels`, `keep_float16` and
        their clips; clips that differ but give the same shapes mix); a mixture refuses
        others in one line naming the feature.
      seed: a whole number in [0, 2**63); with the epoch it decides every draw and order.
      epoch_windows: windows an epoch (default: the sum of the sources' lengths).

    Each batch it reads has one more key, `source`: int64 [batch], the place in `sources`
    of each window's source. A source's transform runs on its part of a batch (before
    the parts are joined); it must return numpy arrays, of the same shapes and dtypes
    from every source.
    """

    def __init__(self, sources: Sequence[tuple[Source, Any]], *, seed: int = 0,
                 epoch_windows: Optional[int] = None):
        _check_pairs(sources)
        self.sources = tuple(source for source, _ in sources)
        self.weights = tuple(weight(f"weight {i}", w) for i, (_, w) in enumerate(sources))
        self.seed = seed_number("seed", seed)
        lengths = [len(source) for source in self.sources]
        names = [f"source {i} ({_described(s)})" for i, s in enumerate(self.sources)]
        refuse_empty(lengths, names)
        refuse_unlike([_signature(s) for s in self.sources], names)
        self.offsets = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)
        self.epoch_windows = optional_whole_number("epoch_windows", epoch_windows, 1) or \
            int(self.offsets[-1])
        self.counts = tuple(epoch_counts(self.weights, self.epoch_windows))

    def __len__(self) -> int:
        """Windows in all sources (the index space; an epoch has `epoch_windows`)."""
        return int(self.offsets[-1])

    def __repr__(self) -> str:
        pairs = ", ".join(f"({source!r}, {w!r})"
                          for source, w in zip(self.sources, self.weights, strict=True))
        return f"Mixture([{pairs}], seed={self.seed}, epoch_windows={self.epoch_windows})"

    def for_epoch(self, epoch: int) -> "Mixture":
        """This mixture with every source reading `epoch`'s clips (a copy)."""
        other = copy.copy(self)
        other.sources = tuple(source.for_epoch(epoch) for source in self.sources)
        return other

    @property
    def reading(self) -> dict[str, Any]:
        """What this mixture reads, as a state names it (JSON-ready): each source's reading
        and weight, the seed and the epoch's windows."""
        return {"sources": [{**source.reading, "weight": w}
                            for source, w in zip(self.sources, self.weights, strict=True)],
                "seed": self.seed, "epoch_windows": self.epoch_windows}

    def locate(self, indices: Any) -> tuple[np.ndarray, np.ndarray]:
        """(each window's source, its number in that source) of mixture windows: indices,
        a slice or a boolean mask, as numpy reads them (readers.arguments'
        `window_numbers`, as a WindowSource reads them)."""
        windows = window_numbers(indices, len(self))
        which = np.searchsorted(self.offsets, windows, side="right") - 1
        return which, windows - self.offsets[which]

    def draws(self, epoch: int) -> np.ndarray:
        """Epoch `epoch`'s windows (mixture numbers), source by source, each source's in
        its permutations' order: what the ranks' slices are dealt from."""
        epoch = whole_number("epoch", epoch, 0)
        return np.concatenate([self._draws(i, epoch, n) + self.offsets[i]
                               for i, n in enumerate(self.counts)])

    def _draws(self, i: int, epoch: int, count: int) -> np.ndarray:
        """Source i's `count` windows of `epoch`: the first of its permutations for it."""
        size = len(self.sources[i])
        permutations = [np.random.default_rng([_STREAM, self.seed, i, epoch, k])
                        .permutation(size) for k in range(-(-count // size))]
        return np.concatenate([np.zeros(0, np.int64), *permutations])[:count].astype(np.int64)

    def order(self, epoch: int, shard_index: int = 0, num_shards: int = 1) -> np.ndarray:
        """Rank `shard_index` of `num_shards`'s windows of `epoch`, in the order it reads
        them: its `deal` of the epoch's draws."""
        return self.deal(self.draws(epoch), epoch, shard_index, num_shards)

    def deal(self, draws: np.ndarray, epoch: int, shard_index: int, num_shards: int
             ) -> np.ndarray:
        """Rank `shard_index` of `num_shards`'s windows of `epoch`'s `draws`: every
        num_shards-th draw from its own on (floor(len(draws) / num_shards) of them),
        permuted."""
        num_shards = whole_number("num_shards", num_shards, 1)
        shard_index = whole_number("shard_index", shard_index, 0, num_shards - 1)
        per_rank = len(draws) // num_shards
        mine = draws[shard_index:per_rank * num_shards:num_shards]
        return mine[np.random.default_rng([_RANK, self.seed, epoch, num_shards, shard_index])
                    .permutation(per_rank)]

    def __getitem__(self, i: Any) -> dict[str, Any]:
        """Window `i` as {name: array} (with `source`); indices, a slice or a boolean mask
        give their `read_batch` (a DataLoader with `batch_size=None` and a batch sampler),
        as a WindowSource's do."""
        if isinstance(i, (int, np.integer)) and not isinstance(i, (bool, np.bool_)):
            return self.__getitems__([int(i)])[0]
        return self.read_batch(i)

    def __getitems__(self, indices: Sequence[int]) -> list[dict[str, Any]]:
        batch = self.read_batch(indices)
        return [{name: column[row, ...] if column.dtype.kind != "S" else column[row]
                 for name, column in batch.items()} for row in range(len(indices))]

    def read_batch(self, indices: Any) -> dict[str, Any]:
        """Mixture windows `indices` stacked, {name: array [len, ...]}, and `source`:
        each source's windows read as one `read_batch` of that source; no index, an
        empty batch (as a WindowSource's)."""
        which, windows = self.locate(indices)
        # no index: source 0's empty batch (the sources agree on keys, shapes and dtypes)
        parts = [(np.flatnonzero(which == i), i) for i in np.unique(which).tolist()] or [
            (np.zeros(0, np.int64), 0)]
        # the parts in this process's memory; the batch, joined, where a DataLoader's
        # worker hands it over without a copy (readers.numpy.handover)
        read = [(rows, i, self.sources[i].read_batch(windows[rows],
                                                     allocate=scatter.private_memory))
                for rows, i in parts]
        shared = handover.arena()
        batch = _joined(len(windows), read, [_described(s) for s in self.sources],
                        scatter.private_memory if shared is None else shared.allocate,
                        {SOURCE: which.astype(np.int64)})
        return batch if shared is None else shared.handed(batch)

def _check_pairs(sources: Any) -> None:
    """TypeError unless `sources` is a non-empty sequence of (source, weight) pairs (a
    string, bytes or a dict is none), each source a Source (a path is none: which split,
    features and clip would be guesses)."""
    if isinstance(sources, (str, bytes, dict)) or not isinstance(sources, Sequence) or \
            not sources or not all(isinstance(p, tuple) and len(p) == 2 for p in sources):
        raise TypeError(f"sources must be a list of (source, weight) pairs, not {sources!r}")
    for i, (source, _) in enumerate(sources):
        if not isinstance(source, Source):
            raise TypeError(f"source {i} is {type(source).__name__} {source!r}, not a source: "
                            "a Mixture mixes readers.numpy.WindowSources (pass "
                            "WindowSource(path, split))")


def _joined(size: int, parts: list, names: list[str], allocate: Callable[[int], np.ndarray],
            more: dict[str, np.ndarray]) -> dict[str, Any]:
    """One batch of `size` rows from each source's part (rows, source, its batch), and
    the columns `more`: its columns of numbers in one block of `allocate`d memory (one
    part in this process's memory: that part's batch as it is)."""
    values = {key: [batch[key] for _, _, batch in parts] for key in _same_keys(parts, names)}
    for key, of_key in values.items():
        _check_arrays(key, parts, of_key, names)
        _check_alike(key, parts, of_key, names)
    if len(parts) == 1 and allocate is scatter.private_memory:
        return {**{key: of_key[0] for key, of_key in values.items()}, **more}
    shapes = {key: ((size, *of_key[0].shape[1:]), np.result_type(*of_key))
              for key, of_key in values.items()}
    shapes.update({key: (column.shape, column.dtype) for key, column in more.items()})
    memory = scatter.carved(allocate, {key: math.prod(shape) * dtype.itemsize
                                       for key, (shape, dtype) in shapes.items()
                                       if dtype.kind != "S"})
    joined = {}
    for key, (shape, dtype) in shapes.items():
        column = (memory[key].view(dtype).reshape(shape) if key in memory else
                  np.empty(shape, dtype))
        if key in more:
            column[...] = more[key]
        else:
            for (rows, _, _), value in zip(parts, values[key], strict=True):
                column[rows] = value
        joined[key] = column
    return joined


def _same_keys(parts: list, names: list[str]) -> list[str]:
    """The keys of the first part's batch; ValueError naming a source whose batch has
    others (or the same in another order)."""
    keys = list(parts[0][2])
    for _, i, batch in parts[1:]:
        if list(batch) != keys:
            raise ValueError(f"{names[i]} gave {sorted(batch)} where {names[parts[0][1]]} gave "
                             f"{sorted(keys)}: a mixture's sources must give the same keys")
    return keys


def _check_arrays(key: str, parts: list, values: list, names: list[str]) -> None:
    """TypeError naming the first source whose `key` (`values`, a part each) is no
    numpy array."""
    bad = next(((i, v) for (_, i, _), v in zip(parts, values, strict=True)
                if not isinstance(v, np.ndarray)), None)
    if bad is not None:
        source, value = bad
        raise TypeError(f"{names[source]} gave {type(value).__name__} for {key!r}: a "
                        "mixture joins numpy arrays (return them from the transform)")


def _check_alike(key: str, parts: list, values: list[np.ndarray], names: list[str]) -> None:
    """ValueError listing every source's shape and dtype of `key` when they cannot be
    stacked: non-string values of more than one shape or dtype (past the batch axis),
    or strings beside other values or of another shape."""
    if len({(v.shape[1:], v.dtype) for v in values if v.dtype.kind != "S"}) > 1 or (
            any(v.dtype.kind == "S" for v in values) and
            not all(v.dtype.kind == "S" and v.shape[1:] == values[0].shape[1:]
                    for v in values)):
        raise ValueError(f"the sources' {key!r} differ in shape or dtype: "
                         + ", ".join(f"{v.dtype} {list(v.shape[1:])} from {names[i]}"
                                     for (_, i, _), v in zip(parts, values, strict=True)))
