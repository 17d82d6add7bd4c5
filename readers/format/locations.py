"""Where a dataset or a file lies: on this machine (a plain path, or a file:// URL) or on
a store (gs://, memory://, any scheme fsspec knows, chained ones too). The one test of
it, for the readers and the job alike (beam_jobs/core/paths.py takes it from here)."""
from __future__ import annotations


def is_remote(path: str) -> bool:
    """Whether `path` names a store (gs://, ...) rather than this machine's files (a
    plain path, or a file:// URL)."""
    return "://" in path and not path.startswith("file://")
