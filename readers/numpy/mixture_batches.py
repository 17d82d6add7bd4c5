"""`MixtureBatches`: one epoch of a `Mixture` (readers.numpy.mixture) as batches of its window
numbers, per rank, resumable from its state; for readers.numpy, which exports it.
"""
from __future__ import annotations

import json
from typing import Any, Sequence

import numpy as np

from readers.numpy.epoch_plan import EpochPlan, plan_arguments
from readers.numpy.mixture import Mixture

# A state's fields of the mixture's reading (`Mixture.reading`); its others are every
# plan's arguments (epoch_plan.py's), MixtureBatches' own.
READING = ("sources", "seed", "epoch_windows")


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

    READING = READING

    def __init__(self, mixture: Mixture, batch_size: int, *, epoch: int = 0,
                 shard_index: int = 0, num_shards: int = 1, drop_remainder: bool = True,
                 start_step: int = 0, resumed_from: Sequence[dict[str, int]] = ()):
        given = plan_arguments(batch_size=batch_size, epoch=epoch, shard_index=shard_index,
                               num_shards=num_shards, drop_remainder=drop_remainder,
                               start_step=start_step, resumed_from=resumed_from)
        self.source = mixture.for_epoch(given["epoch"])   # its deal is the mixture's
        super().__init__(given, mixture.draws(given["epoch"]))

    def _deal(self, order: np.ndarray, shard_index: int, num_shards: int) -> np.ndarray:
        """The mixture's deal of its draws (`Mixture.deal`)."""
        return self.source.deal(order, self.epoch, shard_index, num_shards)

    def _no_batch_error(self, windows: int) -> ValueError:
        return ValueError(f"this mixture gives rank {self._given['shard_index']} of "
                          f"{self._given['num_shards']} {windows} windows an epoch, fewer "
                          f"than batch_size {self.batch_size}: not one batch comes out; "
                          "lower batch_size, or pass epoch_windows")

    @classmethod
    def _differences(cls, state: dict[str, Any], now: dict[str, Any]
                     ) -> list[tuple[str, Any, Any]]:
        """The number of sources, or each source's fields but its path (a copy of a run
        is the same run: its run, split, windows, features, clip, selection, weight), and
        the seed and the epoch's windows, where the state's differ from `now` (as JSON
        has them); TypeError when its sources are not a list of dicts."""
        now = json.loads(json.dumps(now))
        saved = state["sources"]
        if not (isinstance(saved, list) and all(isinstance(s, dict) for s in saved)):
            raise TypeError(f"sources must be a list of dicts, not {saved!r}")
        differ: list[tuple[str, Any, Any]] = []
        if len(saved) != len(now["sources"]):
            differ.append(("sources", len(saved), len(now["sources"])))
        else:
            for i, (was, is_) in enumerate(zip(saved, now["sources"], strict=True)):
                differ += [(f"source {i}'s {key}", was.get(key), is_[key])
                           for key in is_ if key != "dataset" and was.get(key) != is_[key]]
        return differ + [(key, state[key], now[key]) for key in ("seed", "epoch_windows")
                         if state[key] != now[key]]

    @classmethod
    def _named(cls, reading: dict[str, Any]) -> str:
        return f"a mixture of {[source.get('dataset') for source in reading['sources']]}"
