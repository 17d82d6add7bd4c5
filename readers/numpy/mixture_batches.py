"""`MixtureBatches`: one epoch of a `Mixture` (readers.numpy.mixture) as batches of its window
numbers, per rank, resumable from its state; for readers.numpy, which exports it.
"""
from __future__ import annotations

import json
from typing import Any, Sequence

import numpy as np

from readers.numpy.epoch_plan import EpochPlan, plan_arguments
from readers.numpy.mixture import Mixture

# A state's fields besides the mixture's reading: MixtureBatches' arguments (and the
# elastic resumes before it, readers.numpy.epoch_plan's RESUMED_FROM; none in an older state).
ARGUMENTS = ("batch_size", "epoch", "shard_index", "num_shards", "drop_remainder",
             "start_step")


class MixtureBatches(EpochPlan):
    """One epoch of a mixture as batches of mixture window numbers, for rank
    `shard_index` of `num_shards`, from `start_step` on: a pure function of the mixture's
    seed and the epoch. As a DataLoader's sampler with `batch_size=None` over
    `plan.source` (the mixture reading the epoch's clips), each worker reads whole
    batches and the DataLoader keeps their order, so a run resumed from `state(step)`
    (`MixtureBatches.resume`) gets the batches a run never stopped got, whatever its
    workers; with `shard_index` and `num_shards`, `resume` goes on on another number of
    ranks (readers.numpy.epoch_plan: `resumed_from` records it; leave it out otherwise).
    Every rank takes the same number of steps; `drop_remainder` (the default) leaves out
    a rank's last partial batch."""

    ARGUMENTS = ARGUMENTS

    def __init__(self, mixture: Mixture, batch_size: int, *, epoch: int = 0,
                 shard_index: int = 0, num_shards: int = 1, drop_remainder: bool = True,
                 start_step: int = 0, resumed_from: Sequence[dict[str, int]] = ()):
        given = plan_arguments(batch_size=batch_size, epoch=epoch, shard_index=shard_index,
                               num_shards=num_shards, drop_remainder=drop_remainder,
                               start_step=start_step, resumed_from=resumed_from)
        self.mixture = mixture
        self.source = mixture.for_epoch(given["epoch"])
        super().__init__(given, mixture.draws(given["epoch"]))

    def _deal(self, order: np.ndarray, shard_index: int, num_shards: int) -> np.ndarray:
        """The mixture's deal of its draws (`Mixture.deal`)."""
        return self.mixture.deal(order, self.epoch, shard_index, num_shards)

    def _no_batch_error(self, windows: int) -> ValueError:
        return ValueError(f"this mixture gives rank {self._given['shard_index']} of "
                          f"{self._given['num_shards']} {windows} windows an epoch, fewer "
                          f"than batch_size {self.batch_size}: not one batch comes out; "
                          "lower batch_size, or pass epoch_windows")

    @property
    def reading(self) -> dict[str, Any]:
        """The mixture's reading: each source's, with its weight; the seed; the epoch's
        windows."""
        return self.mixture.reading

    @classmethod
    def _check_saved_on(cls, target: Mixture, state: dict[str, Any]) -> None:
        """ValueError in one line naming what differs when `target` is not what the
        state was saved on (a source's run, split, windows, features or clip; the number
        of sources, a weight, the seed, the epoch's windows), or a field the state lacks.
        A source's path is told, not compared (a copy of a run is the same run)."""
        now = json.loads(json.dumps(target.reading))
        saved = _saved_sources(state, now)
        differ = _differences(saved, state, now)
        if differ:
            raise _mismatch_error(saved, now, differ)


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
