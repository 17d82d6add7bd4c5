"""Each complete local shard handed to the kernel's writeback as soon as it is written.

Why: a local run writes its temp files (the spill) and then its shards, together more
than the kernel lets wait in memory (10% of it, by default). Left alone, the kernel
writes back the oldest first, the temp files, which the run deletes seconds later;
deleting blocks so written then waits for that I/O and frees and discards them. Started
as each shard is complete, the writeback goes to the shards, which must reach the disk
anyway, and the temp files are gone before any of them is written (docs/benchmarks.md).
"""
from __future__ import annotations

import logging
import os
import queue
import threading
from typing import Optional

from beam_jobs.core import paths


def start_writeback(path: str) -> None:
    """Have the kernel start writing a complete local file to disk now, rather than when
    its dirty pages pass a threshold (POSIX_FADV_DONTNEED: Linux writes the file's dirty
    pages back, and drops those already clean), from a thread of its own. One thread a
    process takes the files in turn: a call may wait while the disk is busy, and
    thousands of small shards must not make thousands of threads. Advice only: where it
    is missing or fails, nothing changes."""
    if paths.is_remote(path) or not hasattr(os, "posix_fadvise"):
        return
    _writeback_queue().put(path)


def wait_for_writebacks() -> None:
    """Block until every file this process handed to `start_writeback` was advised."""
    if _writebacks is not None and _writebacks[0] == os.getpid():
        _writebacks[1].join()


# (the process that made it, its queue of paths): a forked child makes its own, since
# the parent's thread does not run there. Two first calls at once, from two threads, may
# each start one; both serve their paths.
_writebacks: Optional[tuple[int, queue.Queue]] = None


def _writeback_queue() -> queue.Queue:
    global _writebacks
    if _writebacks is None or _writebacks[0] != os.getpid():
        paths_: queue.Queue = queue.Queue()
        threading.Thread(target=_write_back_each, args=(paths_,), daemon=True,
                         name="start_writeback").start()
        _writebacks = (os.getpid(), paths_)
    return _writebacks[1]


def _write_back_each(paths_: queue.Queue) -> None:
    while True:
        path = paths_.get()
        try:
            _write_back(path)
        except Exception as e:   # said, and the thread goes on with the next file
            logging.getLogger(__name__).warning("could not start the writeback of %s: %s",
                                                path, e)
        finally:
            paths_.task_done()


def _write_back(path: str) -> None:
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:   # gone already (a test's tmp_path): nothing to write
        return
    try:
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    except OSError:
        pass
    finally:
        os.close(fd)
