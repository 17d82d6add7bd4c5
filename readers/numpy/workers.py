"""Worker processes that end when the trainer that started them dies: `end_with_parent`,
a PyTorch DataLoader's `worker_init_fn`; and `forkserver()`, the multiprocessing context
whose workers start without importing torch.

A DataLoader's workers check every 5 s that their parent process is alive, and exit when
it is not. With `multiprocessing_context="forkserver"` (what docs/readers.md advises where
the trainer runs threads) their parent is the forkserver, not the trainer, and the
forkserver lives as long as any process it forked (each holds its "alive" pipe): a
SIGKILLed trainer leaves both running for good, holding its output pipe (`... | tail`
never ends). `end_with_parent` has each worker wait on the sentinel multiprocessing gives
every child of the process that asked for it (`multiprocessing.parent_process()`: the
trainer, whether the worker was forked, spawned or made by a forkserver) and exit the
moment that process is gone; the forkserver, its last child gone, then exits too. Only
the standard library.
"""
from __future__ import annotations

import multiprocessing
import multiprocessing.connection
import os
import threading

EXIT_STATUS = 1      # a worker's, when the trainer died first


def end_with_parent(worker_id: int = 0) -> None:
    """Make this process exit as soon as the process that started it dies.

    Pass it as `worker_init_fn=end_with_parent` (a DataLoader calls it with the worker's
    id, which it does not need), or call it first thing in any multiprocessing child. A
    daemon thread waits on the parent's sentinel: no polling, no cost while the parent
    lives; a parent already dead ends the process at once. Without a multiprocessing
    parent (the main process) it does nothing."""
    parent = multiprocessing.parent_process()
    if parent is not None:
        threading.Thread(target=_exit_when_gone, args=(parent.sentinel,), daemon=True,
                         name="end_with_parent").start()


# What a forkserver imports once for every DataLoader worker it forks (`forkserver`).
PRELOAD = ["torch.utils.data", "readers.numpy.workers"]   # with its package and the reader


def forkserver() -> multiprocessing.context.BaseContext:
    """A DataLoader's `multiprocessing_context`: multiprocessing's forkserver, whose
    server imports torch and the reader once (PRELOAD) before it forks a worker. A
    worker of a bare forkserver imports torch itself, each epoch: about 1.9 s of CPU an
    epoch for two, against 0.1 s (docs/benchmarks.md). The forkserver is started once a
    process: call this before the first DataLoader of the process starts its workers,
    or the server's preload is not this. Like any forkserver or spawn, it imports the
    trainer's script again in each worker: its loop belongs under `if __name__ ==
    "__main__":`."""
    context = multiprocessing.get_context("forkserver")
    context.set_forkserver_preload(PRELOAD)
    return context


def _exit_when_gone(sentinel: int) -> None:
    multiprocessing.connection.wait([sentinel])
    os._exit(EXIT_STATUS)       # at once: no cleanup can reach a dead trainer
