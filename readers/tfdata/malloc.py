"""Keep freed batch memory in the process, so that the next batch does not page-fault.

Each batch the tf.data reader hands out is a fresh block of a few MB (64 latent windows
of [100, 200] float32: 5 MB). glibc's malloc serves blocks that large with mmap, or returns
them to the kernel on free once its heap's free top passes a threshold (by default twice
the largest block freed so far); the next batch then gets new zeroed pages from the
kernel, one page fault per 4 KB touched: a large share of the tf.data reader's CPU time,
and almost none of it with blocks below 32 MB taken from the heap and up to 256 MB of
free heap kept (measured side by side: docs/benchmarks.md, "Reader throughput").

This is a process-wide setting of the C allocator, so it is applied once, only on glibc,
and never over the user's own choice: not when MALLOC_MMAP_THRESHOLD_,
MALLOC_TRIM_THRESHOLD_ or a glibc.malloc tunable is set, nor with
READERS_TUNE_MALLOC=0. An allocator swapped in with LD_PRELOAD (tcmalloc, jemalloc)
does not read these settings.
"""
from __future__ import annotations

import ctypes
import functools
import os
import platform

# glibc's malloc.h
_M_TRIM_THRESHOLD = -1
_M_MMAP_THRESHOLD = -3
MMAP_THRESHOLD = 32 << 20   # glibc's largest: HEAP_MAX_SIZE / 2 on 64-bit
TRIM_THRESHOLD = 256 << 20
OPT_OUT = "READERS_TUNE_MALLOC"


def _user_chose() -> bool:
    return (os.environ.get(OPT_OUT, "1") == "0"
            or "MALLOC_MMAP_THRESHOLD_" in os.environ
            or "MALLOC_TRIM_THRESHOLD_" in os.environ
            or "glibc.malloc." in os.environ.get("GLIBC_TUNABLES", ""))


@functools.cache
def keep_freed_memory() -> bool:
    """Set glibc's mmap and trim thresholds for the readers' batches, once per process.

    Returns whether they were set (False: not glibc, or the user chose otherwise).
    """
    if platform.libc_ver()[0] != "glibc" or _user_chose():
        return False
    libc = ctypes.CDLL(None)
    return bool(libc.mallopt(_M_MMAP_THRESHOLD, MMAP_THRESHOLD)
                and libc.mallopt(_M_TRIM_THRESHOLD, TRIM_THRESHOLD))
