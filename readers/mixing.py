"""What a mixture of sources is in both readers (readers.numpy's `Mixture`, the tf.data
`mix_datasets`): a source's weight, checked (`weight`); the windows each source gives an
epoch (`epoch_counts`), in exact arithmetic so that both readers and every machine
agree; the key that names each window's source in a batch (`SOURCE`); and the
refusals of a source without windows (`refuse_empty`) and of sources whose windows would
not stack (`refuse_unlike`). Numpy only.
"""
from __future__ import annotations

import fractions
import math
from typing import Any, Sequence

import numpy as np

# The batch key that names each window's source: its place in the mixture's list.
SOURCE = "source"


def weight(name: str, value: Any) -> float:
    """A source's weight: a finite number > 0 (a Python or numpy int or float); TypeError
    or ValueError in one line naming it."""
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, float, np.integer,
                                                                      np.floating)):
        raise TypeError(f"{name} must be a number > 0, not {value!r}")
    try:
        number = float(value)
    except OverflowError:     # an int of 1,025 bits or more: its digits would fill lines
        raise ValueError(f"{name} must be a finite number > 0, not an integer of "
                         f"{int(value).bit_length():,} bits, past a float's range") from None
    if not (math.isfinite(number) and number > 0):
        raise ValueError(f"{name} must be a finite number > 0, not {value!r}")
    return number


def epoch_counts(weights: Sequence[float], windows: int) -> list[int]:
    """The windows each source gives an epoch of `windows`: w_i x windows / sum(w)
    rounded so that they sum to `windows` exactly (the largest remainders get one more,
    ties to the earlier source), each within 1 of its exact share. Exact arithmetic on
    the weights' binary values, so both readers and every machine agree."""
    exact = [fractions.Fraction(w) * windows / sum(map(fractions.Fraction, weights))
             for w in weights]
    counts = [math.floor(x) for x in exact]
    by_remainder = sorted(range(len(exact)), key=lambda i: (counts[i] - exact[i], i))
    for i in by_remainder[:windows - sum(counts)]:
        counts[i] += 1
    return counts


def refuse_empty(lengths: Sequence[int], names: Sequence[str]) -> None:
    """ValueError naming the first source without windows (`lengths`: each source's
    windows, `names`: the sources in words): it cannot give its share of an epoch."""
    empty = [i for i, length in enumerate(lengths) if not length]
    if empty:
        raise ValueError(f"{names[empty[0]]} has no windows: it cannot give its share of "
                         "an epoch")


def refuse_unlike(signatures: Sequence[dict[str, tuple[tuple[int, ...], str]]],
                  names: Sequence[str]) -> None:
    """ValueError in one line naming the first feature whose shape or dtype differs
    between two sources (`signatures`: name -> (shape, dtype) of what each gives, `names`:
    the sources in words), or that one gives and another does not: a batch stacks them."""
    first = signatures[0]
    for other, name in zip(signatures[1:], names[1:], strict=True):
        for feature in [*first, *(f for f in other if f not in first)]:
            mine, theirs = first.get(feature), other.get(feature)
            if mine == theirs:
                continue
            said = [f"{dtype} {list(shape)}" if shape is not None else "none"
                    for shape, dtype in (mine or (None, None), theirs or (None, None))]
            raise ValueError(f"these sources cannot be mixed: feature {feature!r} is "
                             f"{said[0]} in {names[0]} but {said[1]} in {name} (a batch "
                             "stacks them): read the same features, with the same "
                             "float_pixels, keep_float16 and clip length, from each")
