"""What a reader was asked to read, checked once: the split's shards and the selected
features of a dataset, with the errors both readers give for a wrong request, and the
error for a dataset that changed under an open reader (`gone_error`).

`readers.make_dataset` (tf.data) and `readers.numpy` (WindowSource, batches) take the same
path, split, features and batch size: they go through this module so that they refuse the
same requests with the same words; and every number and flag they (and `Clip`) take is
checked by its helpers, `whole_number` (readers/format/numbers.py's, which the command
lines' numbers share; `seed_number` for a seed), `flag`, `one_of` (and
`optional_callable`), where it is given, in one line that names it. Numpy only:
readers.numpy imports it.
"""
from __future__ import annotations

import dataclasses
import functools
import os
import stat
from typing import Any, Callable, Optional, Sequence

import numpy as np

from readers.format import (
    DATASET_JSON,
    DatasetSpec,
    FeatureSpec,
    Shard,
    SpecError,
    is_remote,
    load_spec,
)
from readers.format.numbers import (  # noqa: F401 (the readers' check, re-exported)
    optional_whole_number,
    seed_number,
    whole_number,
)


class DatasetChanged(FileNotFoundError):
    """A file that dataset.json listed is gone from under an open reader: the dataset was
    rewritten or deleted. A reader keeps the run it opened (each run's files have names
    of their own) and never reads another run's files: it stops with this."""


def gone_error(path: str, run_id: Optional[str], file: str) -> FileNotFoundError:
    """The error for `file` of the dataset at `path`, which a reader opened at run
    `run_id`, not found: dataset.json, read again, tells a rewrite or a deletion
    (DatasetChanged) from a damaged dataset (a plain FileNotFoundError)."""
    reads = f"run {run_id}" if run_id else "a dataset without a run id"
    try:
        now = load_spec(path)
    except FileNotFoundError:
        return DatasetChanged(f"{path} was deleted while this reader was open (it reads "
                              f"{reads}): {file} and {DATASET_JSON} are gone")
    except (OSError, ValueError) as e:
        return DatasetChanged(f"{path} changed while this reader was open (it reads {reads}): "
                              f"{file} is gone, and its {DATASET_JSON} cannot be read now ({e})")
    listed = {name for split in now.splits.values() for shard in split.shards
              for name in (shard.file, shard.index)} | set(now.files)
    if now.run_id != run_id or file not in listed:
        return DatasetChanged(f"{path} was rewritten while this reader was open (it reads "
                              f"{reads}; {DATASET_JSON} now names run {now.run_id}): {file} "
                              "is gone; open it again")
    return FileNotFoundError(f"{path}: {file}, which its {DATASET_JSON} lists, is missing: "
                             f"the dataset is damaged (python -m readers.inspect {path} "
                             "--verify)")


class NotAFile(ValueError):
    """A dataset's file whose place holds something else: a FIFO (whose open would wait
    for a writer forever), a directory, a device."""


def check_regular(path: str, file: str) -> None:
    """NotAFile naming `file` of the local dataset at `path` when it is not a regular
    file (one missing is told where it is opened). A stat: it never opens it."""
    full = os.path.join(path.removeprefix("file://"), file)
    try:
        mode = os.stat(full).st_mode
    except FileNotFoundError:
        return
    if not stat.S_ISREG(mode):
        raise not_a_file_error(full, mode)


def not_a_file_error(full: str, mode: int) -> NotAFile:
    """The error for the dataset's file at `full`, whose place holds what `mode` (its
    stat's) says, not a regular file."""
    return NotAFile(f"{full}, which {DATASET_JSON} lists, is {file_kind(mode)}, not a "
                    "regular file: the dataset is damaged")


def file_kind(mode: int) -> str:
    """What a file's `mode` says it is, for a line about one that is not a regular file
    (a dataset's, here; readers.inspect's output path)."""
    for test, name in ((stat.S_ISDIR, "a directory"), (stat.S_ISFIFO, "a FIFO"),
                       (stat.S_ISSOCK, "a socket"), (stat.S_ISCHR, "a character device"),
                       (stat.S_ISBLK, "a block device")):
        if test(mode):
            return name
    return "not a file"


def file_size(path: str, run_id: Optional[str], file: str) -> int:
    """The size of `file` of the dataset at `path` (local, or any fsspec scheme); `gone_error`'s
    error when it is not there."""
    full = os.path.join(path.removeprefix("file://"), file)
    try:
        if is_remote(full):
            import fsspec
            fs, inner = fsspec.core.url_to_fs(full)   # `simplecache::gs://...` too
            return fs.size(inner)
        return os.stat(full).st_size
    except FileNotFoundError:
        raise gone_error(path, run_id, file) from None


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


@dataclasses.dataclass(frozen=True)
class Selection:
    """A split of a dataset and the features to read from it, as dataset.json has them.

    `features` keep dataset.json's order whatever the order asked for, so that a batch's
    columns come in the same order from both readers."""
    path: str
    split: str
    spec: DatasetSpec
    shards: tuple[Shard, ...]
    features: tuple[FeatureSpec, ...]
    in_pipeline: bool = False     # `shards` are one input pipeline's (`for_pipeline`)

    @classmethod
    def load(cls, path: str, split: str,
             features: Optional[Sequence[str]] = None) -> Selection:
        """dataset.json of `path`, and ValueError for a split it lacks or a feature it does
        not have (`features` None: all of them; a string: that one).

        The split's first shard with records is measured: every record has the features'
        shapes, so a shard too small for its records at those shapes refuses them
        (SpecError) before a reader allocates a batch by them; each reader checks every
        shard it opens on its own (readers.numpy by its index, tf.data by its count)."""
        spec = load_spec(path)
        if split not in spec.splits:
            raise ValueError(f"split {split!r} is not in {path}; it has {sorted(spec.splits)}")
        shards = tuple(spec.splits[split].shards)
        if not is_remote(path):
            for shard in shards:
                check_regular(path, shard.file)
                if shard.index:
                    check_regular(path, shard.index)
        first = next((shard for shard in shards if shard.examples), None)
        if first is not None:
            try:
                spec.check_shard(first, file_size(path, spec.run_id, first.file))
            except SpecError as e:
                raise SpecError(f"{os.path.join(path, DATASET_JSON)}: {e}") from None
        return cls(path, split, spec, shards, _select(spec, features))

    def gone_error(self, file: str) -> FileNotFoundError:
        """`gone_error` for `file` of this selection's dataset."""
        return gone_error(self.path, self.spec.run_id, file)

    @property
    def windows(self) -> int:
        return sum(shard.examples for shard in self.shards)

    def for_pipeline(self, pipeline: int, pipelines: int) -> Selection:
        """Every `pipelines`-th shard from `pipeline` on: one input pipeline's share, in
        whole shards (tf.data reads shards from start to end)."""
        if len(self.shards) < pipelines:
            raise ValueError(
                f"split {self.split!r} of {self.path} has {len(self.shards)} shards, fewer "
                f"than the {pipelines} input pipelines; rerun the job with --num_shards >= "
                f"{pipelines}")
        return dataclasses.replace(self, shards=self.shards[pipeline::pipelines],
                                   in_pipeline=True)

    def no_batch_error(self, windows: int, batch_size: int, *, holder: str = "has",
                 options: str = "", remedy: str = "") -> ValueError:
        """The error for a request of which not one batch comes out: `windows`, what
        `holder` gets ("has", "gives this host"), are fewer than `batch_size`; `options`
        name those that left the partial batch out, `remedy` what to change."""
        where = " in this input pipeline" if self.in_pipeline else ""
        return ValueError(f"split {self.split!r} of {self.path} {holder} {windows} windows"
                          f"{where}, fewer than batch_size {batch_size}: {options}not one "
                          f"batch comes out{remedy}")


def _select(spec: DatasetSpec, names: Optional[Sequence[str]]) -> tuple[FeatureSpec, ...]:
    if names is None:
        return tuple(spec.features)
    if isinstance(names, str):
        names = [names]
    known = [f.name for f in spec.features]
    unknown = [n for n in names if n not in known]
    if unknown:
        raise ValueError(f"unknown feature(s) {unknown}; this dataset has {known}")
    return tuple(f for f in spec.features if f.name in names)
