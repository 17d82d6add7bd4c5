"""How a run ends in one line: `Refused` (a mistake in what was asked: exit 2), `Failed`
(the run could not make a dataset: exit 1), and the errors of the machine, not of the
job (a full disk, no permission, a read-only file system), told naming the path. Only
make_shards.main turns these into an exit status; any other exception is a bug and keeps
its traceback.

Beam wraps an exception raised in a DoFn: in this process as the cause or context of
another, from a worker process as a RuntimeError whose message is the OSError's last
line with the step it was running. Both are read here.
"""
from __future__ import annotations

import errno
import logging
import os
import re
from typing import Iterator, Optional

import apache_beam

OS_ERRNOS = frozenset((errno.ENOSPC, errno.EDQUOT, errno.EFBIG, errno.EACCES, errno.EPERM,
                       errno.EROFS, errno.EIO, errno.ENOTDIR, errno.EISDIR, errno.EMFILE,
                       errno.ENFILE, errno.ENAMETOOLONG))
# How Beam passes one on: a RuntimeError whose message is the OSError's last line (the
# error of a DoFn, or of a worker process), with the step it was running.
_ERRNO_TEXT = re.compile(r"\[Errno (\d+)\] [^:'\[\\\n]*(?:: '([^'\\\n]*)')?"
                         r"(?: ?\[while running '([^'\\\n]*)'\])?")


class Refused(ValueError):
    """A flag, an input or an output directory this run cannot take; nothing was done.
    The message is the one line that says why."""


class Failed(RuntimeError):
    """The run stopped without committing a dataset (too many failures, no window, a
    full disk); the message says why and what the directory holds."""


def os_error_line(exception: Optional[BaseException], directory: str) -> Optional[str]:
    """"<path>: <error>" for an OS error in OS_ERRNOS (a full disk, no permission, a
    read-only file system...) that ended the run, found in the chain of exceptions Beam
    wraps it in; None for any other exception. An error without a path (a write to a
    full disk) names `directory`, where the run writes, and the step it was in."""
    for error in _chain(exception):
        line = _os_error_said(error, directory)
        if line is not None:
            return line
    return None


def _os_error_said(error: BaseException, directory: str) -> Optional[str]:
    """os_error_line's line for one exception of the chain: an OSError in OS_ERRNOS, or
    a worker's text naming such an errno (with its path, or `directory` and the step);
    None for any other."""
    if isinstance(error, OSError) and error.errno in OS_ERRNOS:
        return f"{error.filename or directory}: {error.strerror}"
    match = _ERRNO_TEXT.search(str(error))
    if match and int(match[1]) in OS_ERRNOS:
        step = f" (in step {match[3]})" if match[3] and not match[2] else ""
        return f"{match[2] or directory}: {os.strerror(int(match[1]))}{step}"
    return None


def _chain(exception: Optional[BaseException]) -> Iterator[BaseException]:
    """An exception, then the one it was raised from (or while handling), and so on,
    each once."""
    seen = set()
    while exception is not None and id(exception) not in seen:
        seen.add(id(exception))
        yield exception
        exception = exception.__cause__ or exception.__context__


def one_line(exception: Optional[BaseException], kind: type) -> Optional[str]:
    """The message of an exception of `kind` (whose message is one line, said as it is)
    in the chain Beam wraps it in, in this process or as a worker's text; or None."""
    marker = f"{kind.__name__}: "
    for error in _chain(exception):
        if isinstance(error, kind):
            return str(error)
        text = str(error)
        if marker in text:
            return text.split(marker, 1)[1].splitlines()[0].split(" [while running")[0]
    return None


# Where Beam's own error log goes (errors.beam_error_to_debug), at debug level.
BEAM_ERRORS = "beam_jobs.beam_errors"
_BEAM_CODE = os.path.dirname(os.path.abspath(apache_beam.__file__)) + os.sep


def beam_error_to_debug(record: logging.LogRecord) -> bool:
    """A logging filter that passes a record below ERROR, or not from Beam's code, and
    moves Beam's error to BEAM_ERRORS at debug level (a portable job's messages come
    through the root logger). Beam logs a failed step's error with its
    traceback where it happens (a worker process's through the job service, as text),
    a traceback a retry, before the run has ended; then the run ends in one line that
    says how (a lost lease, a full disk, workers gone: make_shards.main); on a local
    runner a bug's exception still reaches the command with its traceback (a
    distributed runner's log has it). Shown with
    `logging.getLogger(BEAM_ERRORS).setLevel(logging.DEBUG)` (docs/guarantees.md)."""
    if record.levelno < logging.ERROR or not record.pathname.startswith(_BEAM_CODE):
        return True
    logging.getLogger(BEAM_ERRORS).debug("%s: %s", record.name, record.getMessage(),
                                         exc_info=record.exc_info)
    return False
