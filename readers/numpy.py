"""Windows as numpy arrays, for trainers without TensorFlow (PyTorch, JAX, plain loops).

    from readers.numpy import WindowSource, batches

    source = WindowSource("out/", "train")       # len(source), source[i] -> dict of arrays
    for batch in batches("out/", "train", batch_size=64, seed=0, epoch=3, start_step=120):
        ...

Neither TensorFlow nor Beam is imported. Records are found with the offset index beside
each shard (one seek each, so any window in any order) and read from the protobuf wire
format with the layouts of `readers.format.layout`: each record's fixed-width values go
straight from the file into their row of the batch; CRCs are checked. The values are those of
`readers.make_dataset` (each feature's codec, readers.format.codecs, decides them): float16
and bfloat16 become float32 unless `keep_float16`, PNG and JPEG frames are decoded (with
Pillow), `float_pixels` gives float32 in [0, 1].

A `WindowSource` is a PyTorch map-style `Dataset` and a Grain `RandomAccessDataSource`
as it is: it has `len()` and `[i]`, and it pickles (open files are not part of its
state), so it works in DataLoader worker processes. Gzip shards have no index: random
access is not possible there (use the tf.data reader).

This module is the API only: the request is checked by readers.selection (as make_dataset's
is), records are found and read by readers.shards, and decoded into batches by
readers.scatter.
"""
from __future__ import annotations

import collections
import concurrent.futures
import copy
import os
from typing import Any, Iterator, Optional, Sequence, Union

import numpy as np

from readers import scatter, streaming
from readers.clips import Clip
from readers.selection import Selection, require_positive
from readers.shards import Shards


class WindowSource:
    """The windows of one split, by index: `len(source)`, `source[i]` -> {name: array}.

    Args:
      path: the output directory of beam_jobs.make_shards: local, gs:// (with the
        `[gcs]` extra) or any fsspec path.
      split: which split.
      features: names of the features to read (default: all of dataset.json's).
      float_pixels: uint8 pixel windows come as float32 in [0, 1] (default: as stored).
      keep_float16: float16 and bfloat16 latents stay as stored (default: float32).
      clip: a `readers.clips.Clip`: each window's clip (its frames, mask and labels cut
        alike) and `clip_offset`, instead of the whole window.
      epoch: whose random clips (`for_epoch` gives the same source for another).

    Raises:
      ValueError: no dataset.json, an unknown format version, split or feature, gzip
        shards (they have no index), a dataset.json the shards do not match, or a clip
        longer than the windows.
    """

    def __init__(self, path: str, split: str = "train",
                 features: Optional[Sequence[str]] = None, *, float_pixels: bool = False,
                 keep_float16: bool = False, clip: Optional[Clip] = None, epoch: int = 0):
        self._selection = selection = Selection.load(path, split, features)
        self.path, self.split, self.spec = path, split, selection.spec
        self.features = list(selection.features)
        self.clip, self.epoch = clip, _epoch(epoch)
        self._shards = Shards(selection)
        self._decoder = scatter.Decoder(self.features, float_pixels=float_pixels,
                                        keep_float16=keep_float16, clip=clip,
                                        window=selection.spec.window["length"])

    def for_epoch(self, epoch: int) -> "WindowSource":
        """This source, reading `epoch`'s clips (a copy: the shards and their indexes
        already read are shared, a DataLoader's workers get the epoch with it)."""
        other = copy.copy(self)
        other.epoch = _epoch(epoch)
        return other

    def __len__(self) -> int:
        return self._shards.size

    def __getitem__(self, i: Union[int, Sequence[int], slice, np.ndarray]) -> dict[str, Any]:
        """Window `i` as {name: array} (`video_id` a numpy bytes scalar, an `S` array's
        item); indices, a slice or a boolean mask give their `read_batch`, so that a
        PyTorch DataLoader with `batch_size=None` and a `BatchSampler` reads each batch
        as one. Indices mean what they mean to numpy (`indices`)."""
        if isinstance(i, (int, np.integer)) and not isinstance(i, (bool, np.bool_)):
            return self.__getitems__([i])[0]
        return self.read_batch(i)

    def __getitems__(self, indices: Sequence[int]) -> list[dict[str, Any]]:
        """Windows `indices`, one dict each, read as one `read_batch`: a PyTorch
        DataLoader's workers fetch their batches through it (on gs://, a batch's requests
        all at once)."""
        batch = self.read_batch(indices)
        return [{name: column[row] if column.dtype.kind == "S" else column[row, ...]
                 for name, column in batch.items()} for row in range(len(indices))]

    def read_batch(self, indices: Union[Sequence[int], slice, np.ndarray]) -> dict[str, Any]:
        """Windows `indices` stacked: {name: array [len, ...]}, `video_id` a numpy bytes
        (`S`) array (how: readers.scatter.Decoder.read_batch)."""
        return self._read(self.indices(indices))

    def _read(self, windows: np.ndarray, records: Optional[Sequence[bytes]] = None
              ) -> dict[str, Any]:
        return self._decoder.read_batch(self._shards, windows, self.epoch, records)

    def indices(self, selector: Union[Sequence[int], slice, np.ndarray]) -> np.ndarray:
        """The window numbers a selector names, as numpy reads it: integers (negative
        ones count from the end), a slice, or a boolean mask of `len(self)`. TypeError for
        anything else (a float, a bool alone, a nested list), IndexError out of range."""
        size = len(self)
        if isinstance(selector, slice):
            return np.arange(size)[selector]
        try:
            array = np.asarray(selector)
        except ValueError:   # ragged
            array = np.asarray(selector, dtype=object)
        if array.dtype == np.bool_ and array.ndim == 1:
            if len(array) != size:
                raise IndexError(f"a boolean mask of {len(array)} values for {size} windows")
            return np.flatnonzero(array)
        if array.ndim != 1 or (array.size and array.dtype.kind not in "iu"):
            raise TypeError(f"windows are selected by integers, a slice or a boolean mask "
                            f"of {size} values, not {array.dtype} of shape {array.shape}")
        array = array.astype(np.int64)
        if array.size and not (-size <= array.min() and array.max() < size):
            bad = array[(array < -size) | (array >= size)][0]
            raise IndexError(f"window {bad} is out of range for {size} windows")
        return np.where(array < 0, array + size, array)


def _epoch(epoch: int) -> int:
    if not (isinstance(epoch, (int, np.integer)) and not isinstance(epoch, bool) and epoch >= 0):
        raise ValueError(f"epoch must be a whole number >= 0, got {epoch!r}")
    return int(epoch)


def epoch_order(size: int, *, shuffle: bool, seed: int, epoch: int, shard_index: int,
                num_shards: int) -> np.ndarray:
    """This host's windows for an epoch: a permutation of all of them (a pure function
    of seed and epoch), cut into `num_shards` equal contiguous slices (the few windows
    left over are left out, so that every host takes the same number of steps)."""
    order = (np.random.default_rng([seed, epoch]).permutation(size) if shuffle
             else np.arange(size))
    return _host_slice(order, shard_index, num_shards)


def _host_slice(order: np.ndarray, shard_index: int, num_shards: int) -> np.ndarray:
    if not 0 <= shard_index < num_shards:
        raise ValueError(f"shard_index must be in [0, {num_shards}), got {shard_index}")
    per_host = len(order) // num_shards
    return order[shard_index * per_host:(shard_index + 1) * per_host]


class EpochBatches:
    """The batches of one epoch as lists of window numbers, in `batches()`'s order: a
    pure function of (seed, epoch), cut per host, from `start_step` on. As a DataLoader's
    sampler with `batch_size=None`, its workers read whole batches, and the DataLoader
    keeps their order, so a run resumed with `start_step=k` (or `resume(state)`) gets the
    batches a run never stopped got from step k on, whatever its workers.

    `source` is the source for the epoch's DataLoader: a copy of the one given, reading
    the epoch's clips (`WindowSource.for_epoch`), so that a plan and the clips its
    batches get never disagree, a resumed plan's included.

    `state(step)` is what to save beside a model's checkpoint; `EpochBatches.resume`
    refuses a state of another dataset run or size (an --append or a rebuild since
    changes the permutation: the same step would not mean the same windows).
    """

    def __init__(self, source: WindowSource, batch_size: int, *, shuffle: bool = True,
                 seed: int = 0, epoch: int = 0, shard_index: int = 0, num_shards: int = 1,
                 drop_remainder: bool = True, start_step: int = 0, order: str = "random",
                 buffer_bytes: Optional[int] = None):
        require_positive(batch_size=batch_size, buffer_bytes=buffer_bytes)
        _epoch(epoch)
        streaming.check_order(order, buffer_bytes)
        self.source, self.batch_size = source.for_epoch(epoch), batch_size
        self.options = {"shuffle": shuffle, "seed": seed, "epoch": epoch,
                        "shard_index": shard_index, "num_shards": num_shards,
                        "drop_remainder": drop_remainder, "order": order,
                        "buffer_bytes": buffer_bytes}
        self.buffer_bytes = buffer_bytes or streaming.BUFFER_BYTES
        # the streaming order's chunks (readers.streaming), None in the random-access one
        self.chunks = streaming.chunks_of(source._shards) if order == "stream" else None
        if self.chunks is not None and shuffle:
            self._order = _host_slice(streaming.stream_order(
                self.chunks, seed=seed, epoch=epoch, buffer_bytes=self.buffer_bytes),
                shard_index, num_shards)
        else:
            self._order = epoch_order(len(source), shuffle=shuffle, seed=seed, epoch=epoch,
                                      shard_index=shard_index, num_shards=num_shards)
        size = len(self._order)
        self.steps = size // batch_size if drop_remainder else -(-size // batch_size)
        if self.steps == 0:
            raise source._selection.no_batch(size, batch_size, holder="gives this host")
        if not (isinstance(start_step, (int, np.integer)) and 0 <= start_step <= self.steps):
            raise ValueError(f"start_step must be in [0, {self.steps}] (an epoch here has "
                             f"{self.steps} steps), got {start_step!r}")
        self.start_step = int(start_step)

    def __len__(self) -> int:
        return self.steps - self.start_step

    def __iter__(self) -> Iterator[list[int]]:
        for step in range(self.start_step, self.steps):
            yield self.batch(step)

    def windows(self) -> np.ndarray:
        """The windows of the batches from `start_step` on, in order."""
        return self._order[self.start_step * self.batch_size:self.steps * self.batch_size]

    def batch(self, step: int) -> list[int]:
        return self._order[step * self.batch_size:(step + 1) * self.batch_size].tolist()

    def state(self, step: int) -> dict[str, Any]:
        """What resumes the epoch after `step` steps were taken (JSON-ready)."""
        return {"run_id": self.source.spec.run_id, "windows": len(self.source),
                "batch_size": self.batch_size, "step": step, **self.options}

    @classmethod
    def resume(cls, source: WindowSource, state: dict[str, Any]) -> "EpochBatches":
        """The batches after `state`'s step, on `source`; ValueError in one line when
        `source` is not the dataset run and size the state was saved on."""
        now = {"run_id": source.spec.run_id, "windows": len(source)}
        saved = {key: state.get(key) for key in now}
        if saved != now:
            raise ValueError(f"this state was saved on run {saved['run_id']} with "
                             f"{saved['windows']} windows; {source.path} split "
                             f"{source.split!r} is now run {now['run_id']} with "
                             f"{now['windows']} (an --append or a rebuild): the same step "
                             "would not mean the same windows; start the epoch at step 0")
        options = {key: state[key] for key in ("shuffle", "seed", "epoch", "shard_index",
                                                "num_shards", "drop_remainder")}
        options.update(order=state.get("order", "random"), buffer_bytes=state.get("buffer_bytes"))
        return cls(source, state["batch_size"], start_step=state["step"], **options)


def batches(path: str, split: str, batch_size: int, *, shuffle: bool = True, seed: int = 0,
            epoch: int = 0, shard_index: int = 0, num_shards: int = 1,
            drop_remainder: bool = True, start_step: int = 0,
            features: Optional[Sequence[str]] = None, float_pixels: bool = False,
            keep_float16: bool = False, clip: Optional[Clip] = None, order: str = "random",
            buffer_bytes: Optional[int] = None, threads: Optional[int] = None,
            prefetch: int = 4) -> Iterator[dict[str, Any]]:
    """Batches of one epoch, in an order that is a pure function of (seed, epoch): step k
    of an epoch is always the same batch, so `start_step=k` resumes exactly where a run
    that stopped after k steps would have gone on.

    Args:
      path, split, features, float_pixels, keep_float16, clip: as `WindowSource`'s (a
        clip's random offsets are those of `epoch`).
      batch_size: windows a batch.
      shuffle: a new permutation each epoch (False: the split's order).
      seed, epoch: which permutation.
      shard_index, num_shards: this host's slice of the epoch; every host gets the same
        number of steps (the few windows left over are left out).
      drop_remainder: leave out a last partial batch.
      start_step: the first step to give (a resume).
      order: "random" (each batch drawn from the whole split, a window at a time) or
        "stream" (windows read in chunks of 8 MB of their shards, one request each, and
        mixed in groups of `buffer_bytes`, default 64 MB: for gs://; readers.streaming).
      threads: a pool that reads and parses batches ahead (default: one for latents,
        whose parsing holds Python's lock; one per core for PNG and JPEG frames, which
        Pillow decodes without it).
      prefetch: batches read ahead.

    Returns:
      An iterator of dicts of numpy arrays ([batch_size, ...]; `video_id` a numpy bytes
      (`S`) array).

    Raises:
      ValueError: as `WindowSource`, or fewer windows on this host than a batch.
    """
    source = WindowSource(path, split, features, float_pixels=float_pixels,
                          keep_float16=keep_float16, clip=clip)
    plan = EpochBatches(source, batch_size, shuffle=shuffle, seed=seed, epoch=epoch,
                        shard_index=shard_index, num_shards=num_shards,
                        drop_remainder=drop_remainder, start_step=start_step, order=order,
                        buffer_bytes=buffer_bytes)
    source = plan.source     # the epoch's clips
    if threads is None:
        images = any(f.codec.decodes_images for f in source.features)
        threads = (os.cpu_count() or 1) if images else 1
    chunks = (streaming.Chunks(source._shards, plan.chunks, plan.windows(), batch_size,
                               2 * plan.buffer_bytes)
              if plan.chunks is not None and source._shards.remote else None)

    def read(windows: list[int], reads: Optional[dict]) -> dict[str, Any]:
        windows = np.asarray(windows, np.int64)
        return source._read(windows, None if reads is None else chunks.records(reads, windows))

    with concurrent.futures.ThreadPoolExecutor(threads) as pool:
        try:
            pending: collections.deque = collections.deque()
            for k, windows in enumerate(plan):
                reads = chunks.fetch(k) if chunks is not None else None
                pending.append(pool.submit(read, windows, reads))
                if len(pending) > prefetch:
                    yield pending.popleft().result()
            while pending:
                yield pending.popleft().result()
        finally:
            if chunks is not None:
                chunks.close()

