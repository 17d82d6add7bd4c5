"""A tf.data mixture of datasets or splits with weights: `mix_datasets`.

Each source is `readers.make_dataset`'s stream of its split in the order the job wrote it
(globally shuffled at write time), pass after pass, unbatched; `choose_from_datasets`
takes windows from them as a choice stream says, then they are batched again. An epoch
has the windows and the shares of readers.numpy's `Mixture` (readers.numpy.mixture):
source i gives exactly n_i of the N windows (readers.mixing's `epoch_counts`), in places
drawn as from an urn of the epoch's N windows (each place's source by a stateless draw of
the seed, the epoch and the place, with the chances of the windows left:
`_epoch_choices`), and epoch e takes the n_i windows of the source's stream from e x n_i
on: each window floor(n_i / len) or ceil(n_i / len) times an epoch, as in readers.numpy.
So both readers draw the same number of windows from each source, out of the same
windows; which ones and their order differ (readers.numpy takes a fresh permutation of
each source every epoch, tf.data goes round each source in its written order, every
window before any again). A source may be selected (`select=`: readers.select): its
windows are then those its selection keeps, in the split's order, as a selected
`WindowSource` numbers them, and its stream is `make_dataset`'s of that selection.

Every part here is a pure function of its position (a choice, of the seed, the epoch, the
place and the windows left, which the iterator's state holds), so a checkpoint of the
iterator (readers.tfdata.checkpoints names the mixture in it) resumes exactly.
"""
from __future__ import annotations

import functools
from typing import Any, Optional, Sequence, Union

import numpy as np
import tensorflow as tf

from readers.arguments import flag, optional_whole_number, seed_number, whole_number
from readers.clips import Clip
from readers.mixing import SOURCE, epoch_counts, refuse_empty, refuse_unlike, weight
from readers.request import SplitRequest
from readers.select import Select, SelectedWindows, resolve
from readers.tfdata import checkpoints
from readers.tfdata.dataset import dataset_named, make_dataset, values_named

# The seed word of the choice stream (readers.numpy.mixture seeds its own streams).
_CHOICE = 0x6D697833
# Windows an epoch at most: an epoch's places are int64.
MAX_EPOCH_WINDOWS = 2 ** 63 - 1


def mix_datasets(sources: Sequence[tuple], split: str = "train", batch_size: int = 64, *,
                 seed: int = 0, repeat: bool = False, epoch_windows: Optional[int] = None,
                 drop_remainder: bool = True, features: Optional[Sequence[str]] = None,
                 float_pixels: bool = False, keep_float16: bool = False,
                 clip: Optional[Clip] = None,
                 select: Union[None, Select, Sequence[Optional[Select]]] = None
                 ) -> tf.data.Dataset:
    """Batches of windows mixed from several datasets (or splits) by weight: each element
    is `make_dataset`'s dict and `source`, int64 [batch], each window's source (its place
    in `sources`).

    Args:
      sources: (path, weight) or (path, split, weight) tuples: a dataset written by
        `beam_jobs.make_shards`, the split (default: `split`), and a positive number,
        relative to the others' sum. Their features must agree in names, shapes and
        dtypes (else ValueError in one line naming the feature).
      split: the split of a source that names none.
      batch_size: windows a batch.
      seed: a whole number in [0, 2**63): where each source's windows go in an epoch (the same
        seed, the same batches; each epoch another order).
      repeat: epochs without end (False: one epoch).
      epoch_windows: windows an epoch, at most MAX_EPOCH_WINDOWS (default: the sum of
        the sources' windows, selected ones' as selected); source i gives
        round(w_i x epoch_windows) of them, exactly (readers.mixing.epoch_counts).
      drop_remainder, features, float_pixels, keep_float16, clip: as `make_dataset`'s,
        for every source (one clip for all).
      select: a `readers.Select` for every source, or a list of one for each (None: the
        whole source): a source's windows are those its selection keeps, as
        `make_dataset(select=)` and a selected `WindowSource` read them, resolved now.

    Returns:
      A `tf.data.Dataset` of batches, prefetched; a checkpoint of its iterator resumes
      it, and is refused on a reader of another mixture (other selections too).

    Raises:
      TypeError or ValueError in one line: sources, a weight or a count as above, a
      `select` that is neither a Select nor a list of one per source (Select or None),
      a selection that keeps no window of its source (readers.select.resolve), a
      source without windows, features that differ.
    """
    batch_size = whole_number("batch_size", batch_size, 1)
    seed = seed_number("seed", seed)
    repeat, drop_remainder = flag("repeat", repeat), flag("drop_remainder", drop_remainder)
    entries = _entries(sources, split)
    selects = _selects(select, len(entries))
    weights = [w for _, _, w in entries]
    requests = [SplitRequest.load(path, split, features) for path, split, _ in entries]
    kept = [resolve(chosen, request)
            for chosen, request in zip(selects, requests, strict=True)]
    windows = [s.windows if k is None else len(k)
               for s, k in zip(requests, kept, strict=True)]
    names = [f"source {i} ({path} split {split!r})" for i, (path, split, _) in enumerate(entries)]
    size = _epoch_windows(epoch_windows, windows, names, batch_size,
                          drop_remainder=drop_remainder, repeat=repeat)
    streams = []
    for i, ((path, split, _), chosen) in enumerate(zip(entries, selects, strict=True)):
        # make_dataset resolves the selection again: readers.select kept it (the last 8)
        stream = make_dataset(path, split, min(batch_size, windows[i]), shuffle=False,
                              repeat=True, features=features, float_pixels=float_pixels,
                              keep_float16=keep_float16, clip=clip, select=chosen)
        streams.append(stream.unbatch().map(functools.partial(_with_source, i)))
    refuse_unlike([_signature(s) for s in streams], names)
    epochs = tf.data.Dataset.counter() if repeat else tf.data.Dataset.range(1)
    choices = epochs.flat_map(functools.partial(
        _epoch_choices, counts=tf.constant(epoch_counts(weights, size), tf.int64),
        key=_seed_words(_CHOICE, seed)))
    ds = tf.data.Dataset.choose_from_datasets(streams, choices)
    ds = ds.batch(batch_size, drop_remainder=drop_remainder).prefetch(tf.data.AUTOTUNE)
    return checkpoints.identified(ds, _identity(
        entries, requests, kept, clip, batch_size=batch_size, seed=seed, size=size,
        repeat=repeat, drop_remainder=drop_remainder, float_pixels=float_pixels,
        keep_float16=keep_float16))


def _seed_words(*words: int) -> int:
    """A 63-bit seed from whole numbers (the choice stream's), as numpy's SeedSequence
    mixes them."""
    return int(np.random.SeedSequence(list(words)).generate_state(1, np.uint64)[0] >> 1)


def _epoch_windows(epoch_windows: Optional[int], windows: list[int], names: list[str],
                   batch_size: int, *, drop_remainder: bool, repeat: bool) -> int:
    """Windows an epoch: `epoch_windows` (at most MAX_EPOCH_WINDOWS), or the sum of the
    sources' (`windows`, as selected). ValueError for a source without windows (it cannot
    give its share), or an epoch shorter than a batch that must be whole."""
    refuse_empty(windows, names)
    size = optional_whole_number("epoch_windows", epoch_windows, 1, MAX_EPOCH_WINDOWS) or sum(
        windows)
    if size < batch_size and (drop_remainder or repeat):
        raise ValueError(f"an epoch of this mixture has {size} windows, fewer than "
                         f"batch_size {batch_size}: not one batch comes out; lower "
                         "batch_size, or pass epoch_windows")
    return size


def _signature(stream: tf.data.Dataset) -> dict[str, tuple]:
    """What a source's windows must share with the others': each feature's shape and
    dtype (strings as "bytes"), `source` aside."""
    return {name: (tuple(spec.shape), spec.dtype.name if spec.dtype != tf.string else "bytes")
            for name, spec in stream.element_spec.items() if name != SOURCE}


def _entries(sources: Any, split: str) -> list[tuple[str, str, float]]:
    """(path, split, weight) of each source, checked."""
    said = ("sources must be a list of (path, weight) or (path, split, weight) tuples, "
            f"not {sources!r}")
    if isinstance(sources, (str, bytes, dict)) or not isinstance(sources, Sequence) or \
            not sources:
        raise TypeError(said)
    entries = []
    for i, entry in enumerate(sources):
        if not (isinstance(entry, tuple) and len(entry) in (2, 3) and
                all(isinstance(part, str) for part in entry[:-1])):
            raise TypeError(said)
        path, *named, value = entry
        entries.append((path, named[0] if named else split, weight(f"weight {i}", value)))
    return entries


def _selects(select: Any, sources: int) -> list[Optional[Select]]:
    """The selection of each of `sources` sources (None: the whole source): `select` for
    every one, or its list of one each; TypeError or ValueError in one line for anything
    else (a list of another length, an item that is no Select or None)."""
    if select is None or isinstance(select, Select):
        return [select] * sources
    said = (f"select must be one readers.Select for every source, or a list of one for each "
            f"of the {sources} sources (None: the whole source), not ")
    if isinstance(select, (str, bytes, dict)) or not isinstance(select, Sequence):
        raise TypeError(f"{said}{type(select).__name__} {select!r}")
    if len(select) != sources:
        raise ValueError(f"{said}a {type(select).__name__} of {len(select)}")
    for i, chosen in enumerate(select):
        if chosen is not None and not isinstance(chosen, Select):
            raise TypeError(f"select[{i}] must be a readers.Select or None, not "
                            f"{type(chosen).__name__} {chosen!r}")
    return list(select)


def _with_source(index: int, window: dict[str, tf.Tensor]) -> dict[str, tf.Tensor]:
    return {**window, SOURCE: tf.constant(index, tf.int64)}


def _epoch_choices(epoch: tf.Tensor, *, counts: tf.Tensor, key: int) -> tf.data.Dataset:
    """The source of each window of epoch `epoch`, in order: source i `counts[i]` times,
    drawn as from an urn of the epoch's windows, emptied. Each draw takes source i with
    probability (its windows left) / (windows left), by a stateless uniform float64 of
    (key, epoch, place): every arrangement of the epoch equally likely (to float64's
    precision), as under a uniform permutation of its places, at any epoch size. The
    places permuted by `tf.random.experimental.index_shuffle` (before issue 57), 4
    rounds of a Simon cipher, mixed poorly at large sizes: at 10**9 windows, runs of
    about 8 places from one source. A draw's state is the counts left, which the scan's
    checkpoint keeps."""
    epoch_key = tf.random.stateless_uniform([], tf.stack([tf.constant(key, tf.int64), epoch]),
                                            minval=None, maxval=None, dtype=tf.int64)

    def draw(left: tf.Tensor, place: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor]:
        below = tf.cast(tf.cumsum(left), tf.float64) / tf.cast(tf.reduce_sum(left), tf.float64)
        uniform = tf.random.stateless_uniform([1], tf.stack([epoch_key, place]), dtype=tf.float64)
        source = tf.searchsorted(below, uniform, side="right", out_type=tf.int64)[0]
        return left - tf.one_hot(source, tf.size(left), dtype=tf.int64), source

    return tf.data.Dataset.range(tf.reduce_sum(counts)).scan(counts, draw)


def _identity(entries: list, requests: list, kept: list[Optional[SelectedWindows]],
              clip: Optional[Clip], *, batch_size: int, seed: int, size: int, repeat: bool,
              drop_remainder: bool, float_pixels: bool, keep_float16: bool) -> dict[str, str]:
    """What the iterator's checkpoint names (readers.tfdata.checkpoints): the sources (each
    dataset's directory and run, and its split), the weights, features, clip and order,
    and the selections (only where a source has one, as make_dataset's: a mixture of
    whole sources is named as before selections)."""
    sources = _sources_named(entries, requests)
    values = values_named(float_pixels, keep_float16)
    selected = "; ".join(f"source {i} {'every window' if k is None else k.said()}"
                         for i, k in enumerate(kept))
    return {"dataset": f"a mixture of {sources}",
            "weights": f"weights {[w for _, _, w in entries]}",
            "features": f"features {[f.name for f in requests[0].features]}{values}",
            "clip": "no clip" if clip is None else f"clip {clip}",
            "order": f"batches of {batch_size}{'' if drop_remainder else ' or fewer'}, "
                     f"seed {seed}, epochs of {size} windows{', repeated' if repeat else ''}",
            **({} if all(k is None for k in kept) else {"selections": f"selections: {selected}"})}


def _sources_named(entries: list, requests: list) -> str:
    """How the identity names the sources: each dataset's directory (absolute where
    local) and run, and its split."""
    return "; ".join(
        f"{dataset_named(path, request.spec.run_id)} split {split!r}"
        for (path, split, _), request in zip(entries, requests, strict=True))
