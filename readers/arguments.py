"""The readers' arguments checked where they are given, each refused in one line that
names it: `whole_number` (readers/format/numbers.py's, which the command lines' numbers
share; `optional_whole_number`, and `seed_number` for a seed), `flag`, `one_of` and
`optional_callable`; `window_numbers`, the windows an index, a slice or a mask names; and
`callable_name`, a function as a repr or a resume state names it.

`readers.make_dataset`, readers.numpy, `Select` and `Clip` take every number and flag
through these, so that both readers refuse the same arguments in the same words. Numpy
only.
"""
from __future__ import annotations

import functools
from typing import Any, Callable, Optional, Sequence

import numpy as np

from readers.format.numbers import (  # noqa: F401 (the readers' check, re-exported)
    optional_whole_number,
    seed_number,
    whole_number,
)


def flag(name: str, value: Any) -> bool:
    """`value`, the yes-or-no argument `name`, as a bool; TypeError for anything but a
    bool (numpy's too): the string 'false' would read as true, and a 0 or 1 may be a
    count given in the wrong place."""
    if not isinstance(value, (bool, np.bool_)):
        raise TypeError(f"{name} must be True or False, not {value!r}")
    return bool(value)


def optional_callable(name: str, value: Any) -> Optional[Callable]:
    """`value`, the argument `name` that is a function (or None); TypeError in one line
    for anything else, when it is given rather than when it is first called, deep in a
    reader's thread or a worker process."""
    if value is not None and not callable(value):
        raise TypeError(f"{name} must be a function or None, not {type(value).__name__} "
                        f"{value!r}")
    return value


def callable_name(fn: Optional[Callable]) -> str:
    """A function as a repr or a resume state names it, the same in every process: a
    function (or class) by its qualified name, a functools.partial by its function and
    arguments, another callable object by its own repr, or by its type's name where its
    repr would be the default one (an address). readers.numpy's transform, a selection's
    `where`."""
    if fn is None:
        return "None"
    if isinstance(fn, functools.partial):
        arguments = [callable_name(fn.func), *map(repr, fn.args),
                     *(f"{key}={value!r}" for key, value in fn.keywords.items())]
        return f"functools.partial({', '.join(arguments)})"
    if hasattr(fn, "__qualname__"):
        return f"{getattr(fn, '__module__', None) or '?'}.{fn.__qualname__}"
    kind = type(fn)
    if kind.__repr__ is object.__repr__:
        return f"{kind.__module__}.{kind.__qualname__}()"
    return repr(fn)


def window_numbers(selector: Any, size: int) -> np.ndarray:
    """The window numbers of `size` windows that a selector names, as numpy reads it:
    integers (negative ones count from the end), a slice, or a boolean mask of `size`
    values (`WindowSource[...]` and `Mixture[...]` alike). TypeError for anything else (a
    float, a bool alone, a nested list), IndexError out of range."""
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
    return _integers(array, size)


def _integers(array: np.ndarray, size: int) -> np.ndarray:
    """Integers as window numbers of `size` windows, negative ones from the end;
    TypeError for anything but a flat array of integers, IndexError out of range."""
    if array.ndim != 1 or (array.size and array.dtype.kind not in "iu"):
        raise TypeError(f"windows are selected by integers, a slice or a boolean mask "
                        f"of {size} values, not {array.dtype} of shape {array.shape}")
    array = array.astype(np.int64)
    if array.size and not (-size <= array.min() and array.max() < size):
        bad = array[(array < -size) | (array >= size)][0]
        raise IndexError(f"window {bad} is out of range for {size} windows")
    return np.where(array < 0, array + size, array)


def one_of(name: str, value: Any, choices: Sequence[str]) -> str:
    """`value`, the argument `name`, when it is one of `choices`; ValueError otherwise."""
    if not (isinstance(value, str) and value in choices):
        raise ValueError(f"{name} must be one of {', '.join(choices)}, not {value!r}")
    return value
