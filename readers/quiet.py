"""TensorFlow for the project's command lines, imported without its start-up lines.

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


def tensorflow() -> ModuleType:
    """TensorFlow, imported once with its start-up lines dropped. Its later C++ logs
    below WARNING are dropped too (TF_CPP_MIN_LOG_LEVEL=2, unless set; worker processes
    inherit it)."""
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    if "tensorflow" not in sys.modules:
        with _stderr_to_devnull():
            import tensorflow  # noqa: F401 (imported for its side effect: loaded)
    return sys.modules["tensorflow"]
