"""Whole numbers as the readers and the command lines take them: the one check of a
count, seed, step, index or size (`whole_number`, for a value given to a reader) and its
command-line form (`whole_number_type`, an argparse type for the job's flags, the sample
and readers.inspect), so that a number out of range is refused in the same words
everywhere. Here, in the format package: the leaf that the job and every reader import."""
from __future__ import annotations

import argparse
from typing import Any, Callable, Optional

import numpy as np

# Seeds: what make_dataset, mix_datasets, batches, EpochBatches, Mixture and Clip take
# (the job's and readers.inspect's --seed too): the int64s that tf.data seeds with,
# less the negative ones that numpy's generators refuse.
SEEDS = 2 ** 63


def whole_number(name: str, value: Any, minimum: Optional[int] = None,
                 maximum: Optional[int] = None) -> int:
    """`value`, the argument `name` of a reader, as a Python int: the one check of every
    count, seed, step and index the readers take (Clip, batches, EpochBatches and
    make_dataset's). TypeError unless it is an int or a numpy integer: a bool, a float
    (1.5, NaN, even 2.0) or a string would be a mistake read as a number. ValueError
    outside [minimum, maximum]. It is converted before any arithmetic: a numpy uint8
    computes in its own dtype, where 7 * 37 + 1 wraps to 4."""
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
        raise TypeError(f"{name} must be {_whole(minimum, maximum)}, not {value!r}")
    number = int(value)
    if not _within(number, minimum, maximum):
        raise ValueError(f"{name} must be {_whole(minimum, maximum)}, not {number}")
    return number


def seed_number(name: str, value: Any) -> int:
    """`value`, a seed (the argument `name`), as `whole_number` in [0, SEEDS): the one
    range of every reader's seed, so that a seed one reader takes no other refuses."""
    return whole_number(name, value, 0, SEEDS - 1)


def optional_whole_number(name: str, value: Any, minimum: Optional[int] = None,
                          maximum: Optional[int] = None) -> Optional[int]:
    """`whole_number`, for an argument whose None means "the default"."""
    return None if value is None else whole_number(name, value, minimum, maximum)


def whole_number_type(minimum: Optional[int] = None, maximum: Optional[int] = None
                      ) -> Callable[[str], int]:
    """An argparse type: the text of a whole number in [minimum, maximum], else
    argparse's error (which names the flag) saying what it must be."""
    def integer(text: str) -> int:
        try:
            number = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected an integer, got {text!r}") from None
        if not _within(number, minimum, maximum):
            raise argparse.ArgumentTypeError(f"must be {_whole(minimum, maximum)}, got {number}")
        return number

    return integer


def _within(number: int, minimum: Optional[int], maximum: Optional[int]) -> bool:
    return (minimum is None or number >= minimum) and (maximum is None or number <= maximum)


def _whole(minimum: Optional[int], maximum: Optional[int]) -> str:
    """What a whole number in those bounds is called in a message."""
    if minimum is not None and maximum is not None:
        return f"a whole number in [{minimum}, {maximum}]"
    if minimum is not None:
        return f"a whole number >= {minimum}"
    return "a whole number" if maximum is None else f"a whole number <= {maximum}"
