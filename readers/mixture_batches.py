"""`MixtureBatches`: one epoch of a `Mixture` (readers.mixture) as batches of its window
numbers, per rank, resumable from its state; for readers.numpy, which exports it.
"""
from __future__ import annotations

import json
from typing import Any, Iterator

import numpy as np

from readers.mixture import Mixture
from readers.selection import flag, whole_number

# A state's fields besides the mixture's reading: MixtureBatches' arguments.
ARGUMENTS = ("batch_size", "epoch", "shard_index", "num_shards", "drop_remainder",
             "start_step")


class MixtureBatches:
    """One epoch of a mixture as batches of mixture window numbers, for rank
    `shard_index` of `num_shards`, from `start_step` on: a pure function of the mixture's
    seed and the epoch. As a DataLoader's sampler with `batch_size=None` over
    `plan.source` (the mixture reading the epoch's clips), each worker reads whole
    batches and the DataLoader keeps their order, so a run resumed from `state(step)`
    (`MixtureBatches.resume`) gets the batches a run never stopped got, whatever its
    workers. Every rank takes the same number of steps; `drop_remainder` (the default)
    leaves out a rank's last partial batch."""

    def __init__(self, mixture: Mixture, batch_size: int, *, epoch: int = 0,
                 shard_index: int = 0, num_shards: int = 1, drop_remainder: bool = True,
                 start_step: int = 0):
        num_shards = whole_number("num_shards", num_shards, 1)
        self._given = {
            "batch_size": whole_number("batch_size", batch_size, 1),
            "epoch": whole_number("epoch", epoch, 0),
            "shard_index": whole_number("shard_index", shard_index, 0, num_shards - 1),
            "num_shards": num_shards, "drop_remainder": flag("drop_remainder", drop_remainder),
            "start_step": whole_number("start_step", start_step, 0)}
        self.batch_size = batch_size = self._given["batch_size"]
        self.mixture = mixture
        self.source = mixture.for_epoch(self._given["epoch"])
        self._order = mixture.order(self._given["epoch"], self._given["shard_index"], num_shards)
        size = len(self._order)
        whole = self._given["drop_remainder"]
        self.steps = size // batch_size if whole else -(-size // batch_size)
        if self.steps == 0:
            raise ValueError(f"this mixture gives rank {self._given['shard_index']} of "
                             f"{num_shards} {size} "
                             f"windows an epoch, fewer than batch_size {batch_size}: not one "
                             "batch comes out; lower batch_size, or pass epoch_windows")
        self.start_step = whole_number("start_step", start_step, 0, self.steps)

    def __len__(self) -> int:
        return self.steps - self.start_step

    def __iter__(self) -> Iterator[list[int]]:
        for step in range(self.start_step, self.steps):
            yield self.batch(step)

    def batch(self, step: int) -> list[int]:
        return self._order[step * self.batch_size:(step + 1) * self.batch_size].tolist()

    def windows(self) -> np.ndarray:
        """The mixture windows of the batches from `start_step` on, in order."""
        return self._order[self.start_step * self.batch_size:self.steps * self.batch_size]

    def state(self, step: int) -> dict[str, Any]:
        """What resumes the epoch after `step` steps (JSON-ready): the mixture's reading
        (each source's, with its weight; the seed; the epoch's windows) and the arguments,
        `start_step` = step."""
        step = whole_number("step", step, 0, self.steps)
        return {**self.mixture.reading, **self._given, "start_step": step}

    @classmethod
    def resume(cls, mixture: Mixture, state: dict[str, Any]) -> "MixtureBatches":
        """The batches after `state`'s step, on `mixture`. ValueError in one line naming
        what differs when `mixture` is not what the state was saved on (a source's run,
        split, windows, features or clip; the number of sources, a weight, the seed, the
        epoch's windows), or a field the state lacks; TypeError or ValueError naming an
        argument of the wrong type or range. A source's path is told, not compared (a
        copy of a run is the same run)."""
        if not isinstance(state, dict):
            raise TypeError(f"state must be a dict, as MixtureBatches.state gives it, not "
                            f"{type(state).__name__}")
        now = json.loads(json.dumps(mixture.reading))
        saved = _saved_sources(state, now)
        differ = _differences(saved, state, now)
        if differ:
            raise _mismatch_error(saved, now, differ)
        try:
            return cls(mixture, **{key: state[key] for key in ARGUMENTS})
        except (TypeError, ValueError) as e:
            raise type(e)(f"this state's {e}") from None


def _saved_sources(state: dict[str, Any], now: dict[str, Any]) -> list[dict[str, Any]]:
    """The sources a state was saved on; ValueError when it lacks a field of a mixture's
    reading (`now`) or of MixtureBatches' arguments, TypeError when its sources are not
    a list of dicts."""
    missing = [key for key in (*now, *ARGUMENTS) if key not in state]
    if missing:
        raise ValueError(f"this state lacks {', '.join(missing)}: it is no state "
                         "MixtureBatches.state gave; start the epoch at step 0")
    saved = state["sources"]
    if not (isinstance(saved, list) and all(isinstance(s, dict) for s in saved)):
        raise TypeError(f"this state's sources must be a list of dicts, not {saved!r}")
    return saved


def _differences(saved: list[dict[str, Any]], state: dict[str, Any], now: dict[str, Any]
                 ) -> list[tuple[str, Any, Any]]:
    """(what, saved, now) of each way the mixture a state was saved on differs from the
    one now (`now`, its reading): the number of sources, or each source's fields but its
    path (a copy of a run is the same run); the seed and the epoch's windows."""
    differ: list[tuple[str, Any, Any]] = []
    if len(saved) != len(now["sources"]):
        differ.append(("sources", len(saved), len(now["sources"])))
    else:
        for i, (was, is_) in enumerate(zip(saved, now["sources"], strict=True)):
            differ += [(f"source {i}'s {key}", was.get(key), is_[key])
                       for key in is_ if key != "dataset" and was.get(key) != is_[key]]
    differ += [(key, state[key], now[key]) for key in ("seed", "epoch_windows")
               if state[key] != now[key]]
    return differ


def _mismatch_error(saved: list[dict[str, Any]], now: dict[str, Any],
                    differ: list[tuple[str, Any, Any]]) -> ValueError:
    """The error for a state resumed on a mixture that `differ`s from its own: both
    mixtures' paths, and each difference."""
    changes = ", ".join(f"{key} ({was!r} saved, {is_!r} now)" for key, was, is_ in differ)
    paths = [s.get("dataset") for s in saved]
    return ValueError(f"this state, saved on a mixture of {paths}, cannot resume on "
                      f"{[s['dataset'] for s in now['sources']]}: they differ in "
                      f"{changes}; the same step would not give the same batch: resume "
                      "it on what it was saved on, or start the epoch at step 0")
