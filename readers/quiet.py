"""TensorFlow for the project's command lines, imported without its start-up lines, and
the one line that says how to install it where it is not (the light install).

TensorFlow's C++ runtime prints lines when it loads (oneDNN, CPU features, absl) that
`TF_CPP_MIN_LOG_LEVEL` does not all reach. The job and `readers.inspect` import it through
here; a trainer that imports `readers` gets TensorFlow as it is.
"""
from __future__ import annotations

import contextlib
import os
import sys
from types import ModuleType
from typing import Iterator


@contextlib.contextmanager
def _stderr_to_devnull() -> Iterator[None]:
    """Send file descriptor 2 to /dev/null (C++ writes there, not to sys.stderr)."""
    sys.stderr.flush()
    saved = os.dup(2)
    devnull = os.open(os.devnull, os.O_WRONLY)
    try:
        os.dup2(devnull, 2)
        yield
    finally:
        os.dup2(saved, 2)
        os.close(saved)
        os.close(devnull)


TF_EXTRA = "video-window-shards[tf]"


class NoTensorFlow(ImportError):
    """TensorFlow is not installed: what needs it and how to add it, in one line."""

    def __init__(self, needed_by: str):
        super().__init__(f"{needed_by} needs TensorFlow, which is not installed: "
                         f"pip install '{TF_EXTRA}'")


def missing_tensorflow_error(error: ModuleNotFoundError, needed_by: str) -> ImportError:
    """`NoTensorFlow` when `error` is TensorFlow's own absence, else `error` as it is."""
    return NoTensorFlow(needed_by) if error.name == "tensorflow" else error


def tensorflow(needed_by: str = "this command") -> ModuleType:
    """TensorFlow, imported once with its start-up lines dropped (NoTensorFlow, naming
    `needed_by`, where it is not installed). Its later C++ logs below WARNING are
    dropped too (TF_CPP_MIN_LOG_LEVEL=2, unless set; worker processes inherit it)."""
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    if sys.modules.get("tensorflow") is None:
        try:
            with _stderr_to_devnull():
                import tensorflow  # noqa: F401 (imported for its side effect: loaded)
        except ModuleNotFoundError as e:
            raise missing_tensorflow_error(e, needed_by) from None
    return sys.modules["tensorflow"]
