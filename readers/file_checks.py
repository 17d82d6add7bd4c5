"""A dataset's file that is not what its dataset.json says, as every reader of it (both
readers, `--verify`, the report) tells it: gone from under an open reader (`gone_error`:
`DatasetChanged` for a rewrite or a deletion, a plain FileNotFoundError for a damaged
dataset), or not a regular file (`NotAFile`, found by `check_regular`'s stat, never by an
open, which would wait forever on a FIFO). `file_size` is a file's size, or the error
for one that is gone. Numpy only.
"""
from __future__ import annotations

import os
import stat
from typing import Optional

from readers.format import DATASET_JSON, is_remote, load_spec


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
