"""What both epoch plans are (`EpochBatches`, readers.numpy.epoch_batches, over a source;
`MixtureBatches`, readers.numpy.mixture_batches, over a mixture): one rank's batches of an
epoch as window numbers, its state, and its resume from a state, on the same ranks or
on another number of them (elastic).

A plan is a pure function of its epoch's order (every window of the epoch, in the order
the plan deals them: a source's permutation, a mixture's draws), of how that order is
dealt to `num_shards` ranks (`EpochPlan._deal`: the same number of windows to each), and
of the elastic resumes before it (`resumed_from`); rank `shard_index` reads its windows
`batch_size` a step, from `start_step` on.

An elastic resume. Data-parallel ranks step in lockstep, so a job of R ranks stopped
after step k had read, on each rank, the first k x batch_size windows of its own; the
state any one rank saved says so for all. A job of R' ranks takes the rest of each old
rank's windows, in rank order, cuts them into R' equal contiguous shares (`equal_share`:
the fewer than R' left over are in none, so that every new rank takes the same number
of steps) and gives new rank r share r, from step 0. The plan records the cut,
{num_shards: R, step: k}, in `resumed_from`, and so does its state: a resume of that
state, strict or elastic, makes the same cuts again, in order, before its own. So the
windows of an epoch that no rank reads are those the first ranks' deal left out (fewer
than their number) and, at each cut, fewer than the new ranks' number, besides each
rank's last partial batch where `drop_remainder` leaves it out. On as many ranks as
before, an elastic resume gives each rank what its own state resumes: each old rank's
rest is one share.
"""
from __future__ import annotations

from typing import Any, Callable, Iterator, Optional, TypeVar

import numpy as np

from readers.arguments import flag, whole_number

# The state's fields that are the arguments every plan takes (`plan_arguments`); a
# subclass's ARGUMENTS add its own.
PLAN_ARGUMENTS = ("batch_size", "epoch", "shard_index", "num_shards", "drop_remainder",
                  "start_step")
# The state's record of the elastic resumes before a plan: [{num_shards, step}, ...],
# oldest first. A state saved before there were elastic resumes lacks it: none.
RESUMED_FROM = "resumed_from"
_CUT = ("num_shards", "step")
_Plan = TypeVar("_Plan", bound="EpochPlan")


def equal_share(order: np.ndarray, shard_index: int, num_shards: int) -> np.ndarray:
    """Share `shard_index` of `order` cut into `num_shards` equal contiguous shares (the
    fewer than `num_shards` windows at its end left over are in none)."""
    num_shards = whole_number("num_shards", num_shards, 1)
    shard_index = whole_number("shard_index", shard_index, 0, num_shards - 1)
    per_share = len(order) // num_shards
    return order[shard_index * per_share:(shard_index + 1) * per_share]


def plan_arguments(*, batch_size: Any, epoch: Any, shard_index: Any, num_shards: Any,
                   drop_remainder: Any, start_step: Any, resumed_from: Any) -> dict[str, Any]:
    """The arguments every plan takes, checked, as Python values (start_step's end is
    the epoch's, checked once it is known)."""
    num_shards = whole_number("num_shards", num_shards, 1)
    return {"batch_size": whole_number("batch_size", batch_size, 1),
            "epoch": whole_number("epoch", epoch, 0),
            "shard_index": whole_number("shard_index", shard_index, 0, num_shards - 1),
            "num_shards": num_shards, "drop_remainder": flag("drop_remainder", drop_remainder),
            "start_step": whole_number("start_step", start_step, 0),
            RESUMED_FROM: _cuts(resumed_from)}


def _cuts(resumed_from: Any) -> list[dict[str, int]]:
    """`resumed_from` checked: a list (or tuple) of {num_shards, step} dicts of whole
    numbers, fresh copies."""
    if not (isinstance(resumed_from, (list, tuple)) and
            all(isinstance(cut, dict) and set(cut) == set(_CUT) for cut in resumed_from)):
        raise TypeError(f"{RESUMED_FROM} must be a list of {{num_shards, step}} dicts, as a "
                        f"state names the elastic resumes before it, not {resumed_from!r}")
    return [{"num_shards": whole_number(f"{RESUMED_FROM}'s num_shards", cut["num_shards"], 1),
             "step": whole_number(f"{RESUMED_FROM}'s step", cut["step"], 0)}
            for cut in resumed_from]


def _new_ranks(shard_index: Any, num_shards: Any) -> Optional[tuple[int, int]]:
    """(shard_index, num_shards) of an elastic resume, checked; None for a strict one
    (neither given)."""
    if shard_index is None and num_shards is None:
        return None
    if shard_index is None or num_shards is None:
        raise TypeError("shard_index and num_shards go together: pass both to resume on "
                        "other ranks, or neither to resume on the ranks the state was saved on")
    num_shards = whole_number("num_shards", num_shards, 1)
    return whole_number("shard_index", shard_index, 0, num_shards - 1), num_shards


class EpochPlan:
    """One rank's batches of an epoch, as lists of window numbers (the module's
    docstring): `len`, iteration from `start_step` (a DataLoader's sampler), `batch(step)`,
    `windows()`, `state(step)` and `resume`, which refuses a state saved on another
    reading than its target's. A subclass checks its arguments (`plan_arguments` and its
    own), makes its epoch's order, and gives both to `__init__`; it says how the order is
    dealt to ranks (`_deal`), the error for a plan of no batch (`_no_batch_error`), how a
    saved reading differs from its target's (`_differences`) and how a reading is named
    in an error (`_named`)."""

    # The state's fields of the reading that every state has, and of the subclass's
    # arguments (`resumed_from` aside).
    READING: tuple[str, ...] = ()
    ARGUMENTS: tuple[str, ...] = PLAN_ARGUMENTS
    # What its batches are read from (a subclass's): the epoch's source or mixture, whose
    # `read_batch` takes a batch's window numbers, and whose `reading` names what it reads.
    source: Any

    def __init__(self, given: dict[str, Any], order: np.ndarray):
        """`given`: the arguments, checked (what a state names); `order`: the epoch's."""
        self._given = given
        self.batch_size = given["batch_size"]
        self.epoch = given["epoch"]
        self._order = self._rank_windows(order)
        size = len(self._order)
        self.steps = self._steps(size)
        if self.steps == 0 and not given[RESUMED_FROM]:   # a resume's rest may be no batch
            raise self._no_batch_error(size)
        self.start_step = whole_number("start_step", given["start_step"], 0, self.steps)

    def _rank_windows(self, order: np.ndarray) -> np.ndarray:
        """This rank's windows of the epoch's `order`, in the order it reads them: its
        deal, or, after elastic resumes, its share of what the ranks before had not read
        (ValueError naming a cut's step past its ranks' epoch)."""
        cuts = self._given[RESUMED_FROM]
        shard_index, num_shards = self._given["shard_index"], self._given["num_shards"]
        if not cuts:
            return self._deal(order, shard_index, num_shards)
        ranks = [self._deal(order, rank, cuts[0]["num_shards"])
                 for rank in range(cuts[0]["num_shards"])]
        for i, cut in enumerate(cuts):
            rest = self._unread(ranks, cut["step"])
            ends = cuts[i + 1]["num_shards"] if i + 1 < len(cuts) else num_shards
            ranks = [equal_share(rest, rank, ends) for rank in range(ends)]
        return ranks[shard_index]

    def _unread(self, ranks: list[np.ndarray], step: int) -> np.ndarray:
        """What `ranks` (each one's windows, all as many) had not read after `step` steps:
        each one's windows from step x batch_size on, in rank order."""
        step = whole_number(f"{RESUMED_FROM}'s step", step, 0, self._steps(len(ranks[0])))
        return np.concatenate([windows[step * self.batch_size:] for windows in ranks])

    def _steps(self, size: int) -> int:
        """The steps of a rank of `size` windows: its whole batches, and a last partial
        one unless `drop_remainder`."""
        return size // self.batch_size if self._given["drop_remainder"] else \
            -(-size // self.batch_size)

    def _deal(self, order: np.ndarray, shard_index: int, num_shards: int) -> np.ndarray:
        """Rank `shard_index` of `num_shards`'s windows of the epoch's `order`, in the order
        it reads them: floor(len(order) / num_shards) of them on every rank."""
        raise NotImplementedError

    def _no_batch_error(self, windows: int) -> ValueError:
        """The error for a plan whose rank gets `windows`, fewer than a batch."""
        raise NotImplementedError

    @classmethod
    def _differences(cls, state: dict[str, Any], now: dict[str, Any]
                     ) -> list[tuple[str, Any, Any]]:
        """(what, saved, now) of each way in which the reading `state` was saved on
        differs from `now`, a target's; TypeError or ValueError for a field of the
        wrong type."""
        raise NotImplementedError

    @classmethod
    def _named(cls, reading: dict[str, Any]) -> str:
        """A reading (a state's, or a target's) as an error names it."""
        raise NotImplementedError

    @property
    def reading(self) -> dict[str, Any]:
        """What the plan reads, as its state names it (JSON-ready): its source's."""
        return self.source.reading

    def __len__(self) -> int:
        return self.steps - self.start_step

    def __iter__(self) -> Iterator[list[int]]:
        for step in range(self.start_step, self.steps):
            yield self.batch(step)

    def batch(self, step: int) -> list[int]:
        return self._order[step * self.batch_size:(step + 1) * self.batch_size].tolist()

    def windows(self) -> np.ndarray:
        """The windows of the batches from `start_step` on, in order."""
        return self._order[self.start_step * self.batch_size:self.steps * self.batch_size]

    def state(self, step: int) -> dict[str, Any]:
        """What resumes the epoch after `step` steps were taken (JSON-ready): the reading
        and the arguments that resume it (`start_step` = step), the elastic resumes
        before this plan with them."""
        step = whole_number("step", step, 0, self.steps)
        return {**self.reading, **self._given, "start_step": step,
                RESUMED_FROM: [dict(cut) for cut in self._given[RESUMED_FROM]]}

    @classmethod
    def resume(cls: type[_Plan], target: Any, state: dict[str, Any], *,
               shard_index: Optional[int] = None, num_shards: Optional[int] = None) -> _Plan:
        """The batches after `state`'s step, on `target` (what the plan reads). Without
        `shard_index` and `num_shards`, the state's own rank's; with them, rank
        `shard_index` of `num_shards`'s share of what the ranks that saved it had not
        read (an elastic resume, the module's docstring: any of those ranks' state
        gives the same). In one line: TypeError or ValueError naming a field the state
        lacks, or whose value is of the wrong type, or an argument; ValueError when
        `target` is not what the state was saved on."""
        new_ranks = _new_ranks(shard_index, num_shards)
        if not isinstance(state, dict):
            raise TypeError(f"state must be a dict, as {cls.__name__}.state gives it, not "
                            f"{type(state).__name__}")
        cls._check_saved_on(target, state)
        make: Callable[..., _Plan] = cls      # a subclass: its target, then its arguments
        try:
            plan = make(target, **{key: state[key] for key in cls.ARGUMENTS},
                        resumed_from=state.get(RESUMED_FROM, []))
        except (TypeError, ValueError) as e:
            raise type(e)(f"this state's {e}") from None
        if new_ranks is None:
            return plan
        cut = {"num_shards": plan._given["num_shards"], "step": plan.start_step}
        return make(target, **{**plan._given, "shard_index": new_ranks[0],
                              "num_shards": new_ranks[1], "start_step": 0,
                              RESUMED_FROM: [*plan._given[RESUMED_FROM], cut]})

    @classmethod
    def _check_saved_on(cls, target: Any, state: dict[str, Any]) -> None:
        """In one line: ValueError when `state` lacks a field of the reading or of the
        arguments; TypeError or ValueError for a field of the reading of the wrong type;
        ValueError naming each difference (saved and now) when `target` reads another
        reading than the state was saved on (a run id's: an --append or a rebuild)."""
        missing = [key for key in (*cls.READING, *cls.ARGUMENTS) if key not in state]
        if missing:
            raise ValueError(f"this state lacks {', '.join(missing)}: it is no state "
                             f"{cls.__name__}.state gave (or one of a version before these "
                             "fields); start the epoch at step 0")
        now = target.reading
        try:
            differ = cls._differences(state, now)
        except (TypeError, ValueError) as e:
            raise type(e)(f"this state's {e}") from None
        if not differ:
            return
        changes = ", ".join(f"{key} ({was!r} saved, {is_!r} now)" for key, was, is_ in differ)
        since = (": an --append or a rebuild since"
                 if any(key.endswith("run_id") for key, _, _ in differ) else "")
        raise ValueError(f"this state, saved on {cls._named(state)}, cannot resume on "
                         f"{cls._named(now)}: they differ in {changes}{since}; the same step "
                         "would not give the same batch: resume it on what it was saved on, "
                         "or start the epoch at step 0")


class BatchSource:
    """An epoch plan's batches as a random-access source of batches: item k is the
    plan's batch from `start_step` + k, read whole into `plan.source` (a Grain
    `RandomAccessDataSource` as it is, or any loader that asks for items by number). A
    loader that asks for a window an item (Grain over a `WindowSource`) reads, decodes
    and stacks each window apart; one of these items is one read of a batch. Its repr
    names the plan's state at its start, so a loader's checkpoint resumes only on the
    same plan (Grain compares the reprs)."""

    def __init__(self, plan: EpochPlan):
        self.plan = plan

    def __len__(self) -> int:
        return len(self.plan)

    def __getitem__(self, item: int) -> dict[str, Any]:
        item = whole_number("item", item, 0)
        if item >= len(self):
            raise IndexError(f"item {item} of a plan of {len(self)} batches")
        return self.plan.source.read_batch(self.plan.batch(self.plan.start_step + item))

    def __repr__(self) -> str:
        return f"BatchSource({self.plan.state(self.plan.start_step)!r})"
