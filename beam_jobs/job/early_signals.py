"""Ctrl-C or SIGTERM while the command imports Beam and TensorFlow (seconds, before
main() installs the run's own handlers, job/lifecycle.py): one line and exit 130, as
later, instead of a traceback from inside an import. Standard library only, so that
importing it costs nothing."""
from __future__ import annotations

import os
import signal

LINE = b"python -m beam_jobs.make_shards: interrupted: nothing was committed\n"


def _stopped(signum, frame) -> None:
    os.write(2, LINE)
    os._exit(130)


def install() -> None:
    for signum in (signal.SIGINT, signal.SIGTERM):
        signal.signal(signum, _stopped)
