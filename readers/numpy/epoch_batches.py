"""An epoch's batches over a `WindowSource`: `EpochBatches`, the plan (a pure function
of seed and epoch, cut per host, resumable from its state), and `batches`, which reads
the plan's batches ahead in threads (readers.numpy is the API).
"""
from __future__ import annotations

import collections
import concurrent.futures
import dataclasses
import os
from typing import Any, Iterator, Optional, Sequence

import numpy as np

from readers.arguments import flag, optional_whole_number, seed_number, whole_number
from readers.clips import Clip
from readers.numpy import streaming
from readers.numpy.epoch_plan import PLAN_ARGUMENTS, EpochPlan, equal_share, plan_arguments
from readers.numpy.window_source import SELECTION, Transform, WindowSource
from readers.select import Select


def epoch_order(size: int, *, shuffle: bool, seed: int, epoch: int, shard_index: int,
                num_shards: int) -> np.ndarray:
    """This host's windows for an epoch: a permutation of all of them (a pure function
    of seed and epoch), cut into `num_shards` equal contiguous slices (the few windows
    left over are left out, so that every host takes the same number of steps)."""
    return equal_share(_permutation(size, shuffle, seed, epoch), shard_index, num_shards)


def _permutation(size: int, shuffle: bool, seed: int, epoch: int) -> np.ndarray:
    return np.random.default_rng([seed, epoch]).permutation(size) if shuffle else \
        np.arange(size)


# What a resume state holds: the reading it was saved on (checked against the source it
# resumes on; the dataset's path only told, since a copy of a run is the same run; the
# selection only where the state has one, as a state saved before selections lacks it),
# and the arguments of EpochBatches that make its batches (given back to it): every
# plan's and its own, with the elastic resumes before it (epoch_plan.py's RESUMED_FROM).
READING = ("dataset", "run_id", "split", "windows", "features", "clip")
ARGUMENTS = (*PLAN_ARGUMENTS, "shuffle", "seed", "order", "buffer_bytes")


class EpochBatches(EpochPlan):
    """The batches of one epoch as lists of window numbers, in `batches()`'s order: a
    pure function of (seed, epoch), cut per host, from `start_step` on. As a DataLoader's
    sampler with `batch_size=None`, its workers read whole batches, and the DataLoader
    keeps their order, so a run resumed with `start_step=k` (or `resume(state)`) gets the
    batches a run never stopped got from step k on, whatever its workers.

    `source` is the source for the epoch's DataLoader: a copy of the one given, reading
    the epoch's clips (`WindowSource.for_epoch`), so that a plan and the clips its
    batches get never disagree, a resumed plan's included. It keeps the given source's
    transform, which each worker then runs on the batches it reads; a state does not
    name the transform (a function is not JSON): resume on a source with the same one.

    `state(step)` is what to save beside a model's checkpoint; `EpochBatches.resume`
    refuses a state of another run, split, size, features, clip or selection (an
    --append or a rebuild since changes the permutation; another split, clip or
    selection other windows or frames: the same step would not give the same batch),
    and resumes on another number of hosts with `shard_index` and `num_shards`
    (readers.numpy.epoch_plan: `resumed_from` records it; leave it out otherwise).
    Over a source with a selection, the order is of its selected windows (0..n-1),
    and the streaming order reads only the chunks that hold one.
    """

    READING = READING
    ARGUMENTS = ARGUMENTS

    def __init__(self, source: WindowSource, batch_size: int, *, shuffle: bool = True,
                 seed: int = 0, epoch: int = 0, shard_index: int = 0, num_shards: int = 1,
                 drop_remainder: bool = True, start_step: int = 0, order: str = "random",
                 buffer_bytes: Optional[int] = None,
                 resumed_from: Sequence[dict[str, int]] = ()):
        given = _arguments(batch_size=batch_size, shuffle=shuffle, seed=seed, epoch=epoch,
                           shard_index=shard_index, num_shards=num_shards,
                           drop_remainder=drop_remainder, order=order,
                           buffer_bytes=buffer_bytes, start_step=start_step,
                           resumed_from=resumed_from)
        self.source = source.for_epoch(given["epoch"])
        shuffle, seed, epoch = given["shuffle"], given["seed"], given["epoch"]
        self.buffer_bytes = given["buffer_bytes"] or streaming.BUFFER_BYTES
        # the streaming order's chunks (readers.numpy.streaming), None in the random-access one
        selected = source.selected
        self.chunks = (streaming.chunks_of(source.shards, windows=selected)
                       if order == "stream" else None)
        if self.chunks is not None and shuffle:
            epoch_windows = streaming.stream_order(self.chunks, seed=seed, epoch=epoch,
                                                   buffer_bytes=self.buffer_bytes,
                                                   selected=selected)
        else:
            epoch_windows = _permutation(len(source), shuffle, seed, epoch)
        super().__init__(given, epoch_windows)

    def _deal(self, order: np.ndarray, shard_index: int, num_shards: int) -> np.ndarray:
        """Hosts take equal contiguous slices of the epoch's order (`equal_share`)."""
        return equal_share(order, shard_index, num_shards)

    def _no_batch_error(self, windows: int) -> ValueError:
        return self.source.no_batch_error(windows, self.batch_size, holder="gives this host")

    @classmethod
    def _differences(cls, state: dict[str, Any], now: dict[str, Any]
                     ) -> list[tuple[str, Any, Any]]:
        """Each field of the reading but the dataset's path (a copy of a run is the same
        run) in which the state's, each checked for its type, differs from `now`."""
        saved = _saved_reading(state)
        return [(key, saved[key], now[key]) for key in (*READING, SELECTION)
                if key != "dataset" and saved[key] != now[key]]

    @classmethod
    def _named(cls, reading: dict[str, Any]) -> str:
        return f"{reading['dataset']} split {reading['split']!r}"


def _arguments(*, shuffle: Any, seed: Any, order: Any, buffer_bytes: Any,
               **common: Any) -> dict[str, Any]:
    """EpochBatches' arguments checked, as Python values: every plan's
    (`plan_arguments`) and its own."""
    buffer_bytes = optional_whole_number("buffer_bytes", buffer_bytes, 1)
    return {**plan_arguments(**common), "shuffle": flag("shuffle", shuffle),
            "seed": seed_number("seed", seed),
            "order": streaming.check_order(order, buffer_bytes), "buffer_bytes": buffer_bytes}


def _saved_reading(state: dict[str, Any]) -> dict[str, Any]:
    """The reading a state names, each field checked for its type."""
    _check_names(state)
    clip = _saved_clip(state["clip"])
    selection = state.get(SELECTION)
    if not (selection is None or isinstance(selection, dict)):
        raise TypeError(f"{SELECTION} must be None or what a selection's reading names, "
                        f"not {selection!r}")
    return {key: state[key] for key in READING} | {
        "windows": whole_number("windows", state["windows"], 0), "clip": clip,
        SELECTION: selection}


def _check_names(state: dict[str, Any]) -> None:
    """TypeError unless a state's dataset, split and run id (or None) are strings, and
    its features a list of names."""
    for key in ("dataset", "split", "run_id"):
        if not (isinstance(state[key], str) or (key == "run_id" and state[key] is None)):
            raise TypeError(f"{key} must be a string, not {state[key]!r}")
    features = state["features"]
    if not (isinstance(features, list) and all(isinstance(name, str) for name in features)):
        raise TypeError(f"features must be a list of feature names, not {features!r}")


def _saved_clip(clip: Any) -> Optional[dict[str, Any]]:
    """A state's clip, None or a Clip's fields, as the Clip they make names it (its
    checks applied); TypeError for anything else."""
    if clip is None:
        return None
    if not (isinstance(clip, dict) and set(clip) == {f.name for f in dataclasses.fields(Clip)}):
        raise TypeError(f"clip must be None or a Clip's fields, not {clip!r}")
    return dataclasses.asdict(Clip(**clip))


def batches(path: str, split: str, batch_size: int, *, shuffle: bool = True, seed: int = 0,
            epoch: int = 0, shard_index: int = 0, num_shards: int = 1,
            drop_remainder: bool = True, start_step: int = 0,
            features: Optional[Sequence[str]] = None, float_pixels: bool = False,
            keep_float16: bool = False, clip: Optional[Clip] = None, order: str = "random",
            buffer_bytes: Optional[int] = None, threads: Optional[int] = None,
            prefetch: int = 4, transform: Optional[Transform] = None,
            select: Optional[Select] = None) -> Iterator[dict[str, Any]]:
    """Batches of one epoch, in an order that is a pure function of (seed, epoch): step k
    of an epoch is always the same batch, so `start_step=k` resumes exactly where a run
    that stopped after k steps would have gone on.

    Args:
      path, split, features, float_pixels, keep_float16, clip, transform, select: as
        `WindowSource`'s (a clip's random offsets are those of `epoch`); the transform
        runs in the `threads` that read the batches, on each as read (a clip's
        included), before the loop gets it; with a selection, the epoch is of the
        windows it keeps.
      batch_size: windows a batch.
      shuffle: a new permutation each epoch (False: the split's order).
      seed, epoch: which permutation (a seed is a whole number in [0, 2**63)).
      shard_index, num_shards: this host's slice of the epoch; every host gets the same
        number of steps (the few windows left over are left out).
      drop_remainder: leave out a last partial batch.
      start_step: the first step to give (a resume).
      order: "random" (each batch drawn from the whole split, a window at a time) or
        "stream" (windows read in chunks of 8 MB of their shards, one request each, and
        mixed in groups of `buffer_bytes`, default 64 MB: for gs://; readers.numpy.streaming).
      threads: a pool that reads and parses batches ahead (default: one for latents,
        whose parsing holds Python's lock; one per core for PNG and JPEG frames, which
        Pillow decodes without it).
      prefetch: batches read ahead.

    Returns:
      An iterator of dicts of numpy arrays ([batch_size, ...]; `video_id` a numpy bytes
      (`S`) array), or of what `transform` returns.

    Raises:
      ValueError, TypeError: as `WindowSource` and `EpochBatches`, or fewer windows on
        this host than a batch: when `batches` is called, before the first batch is
        asked for.
    """
    threads = optional_whole_number("threads", threads, 1)
    prefetch = whole_number("prefetch", prefetch, 0)
    source = WindowSource(path, split, features, float_pixels=float_pixels,
                          keep_float16=keep_float16, clip=clip, transform=transform,
                          select=select)
    plan = EpochBatches(source, batch_size, shuffle=shuffle, seed=seed, epoch=epoch,
                        shard_index=shard_index, num_shards=num_shards,
                        drop_remainder=drop_remainder, start_step=start_step, order=order,
                        buffer_bytes=buffer_bytes)
    if threads is None:
        images = any(f.codec.decodes_images for f in source.features)
        threads = (os.cpu_count() or 1) if images else 1
    return _read_ahead(plan, threads, prefetch)


def _read_ahead(plan: EpochBatches, threads: int, prefetch: int) -> Iterator[dict[str, Any]]:
    """The batches of `plan`, read by `threads` threads, `prefetch` ahead."""
    source = plan.source     # the epoch's clips
    chunks = (streaming.Chunks(source.shards, plan.chunks, source.in_split(plan.windows()),
                               plan.batch_size, 2 * plan.buffer_bytes)
              if plan.chunks is not None and source.shards.remote else None)

    def read(windows: list[int], reads: Optional[dict]) -> dict[str, Any]:
        in_split = source.in_split(np.asarray(windows, np.int64))
        return source.read_split_windows(
            in_split, None if reads is None or chunks is None else chunks.records(reads, in_split))

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
