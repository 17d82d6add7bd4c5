"""Literal-path file operations for the output directory, on local disk and on GCS.

Why not Beam's FileSystems here: its `match` and `delete` treat a path as a glob (so
`out[1]` names other files), its local delete follows symbolic links in the path, and
it has no create-if-absent. The job's data goes through FileSystems, or the shuffle's
streams (`streams.py`, on top of this module); the few operations that decide what may
be deleted go here, and the lease's compare and swap in `swap.py`, on top of this
module:

- names are names: nothing is globbed;
- a symbolic link is never followed for deleting, and nothing outside the tree given
  is deleted;
- GCS deletes go 100 to a batch request; every delete's answer is checked, a failed
  one is tried again, and one that keeps failing raises OSError (never silent).
"""
from __future__ import annotations

import functools
import os
import shutil
import stat
import time
import uuid
from typing import Iterable, NamedTuple, Optional

from beam_jobs.core import paths

GCS_BATCH = 100   # operations per GCS batch request, the service's limit
DELETE_ATTEMPTS = 3   # a failed delete is tried again this often, then it raises
RETRY_SECONDS = 0.5


class Entry(NamedTuple):
    name: str
    kind: str    # "file", "dir", "link" or "other" (a FIFO, a device, a socket)
    size: int = 0


def is_gcs(path: str) -> bool:
    return path.startswith("gs://")


def supported(path: str) -> bool:
    return is_gcs(path) or not paths.is_remote(path)


# --- GCS ----------------------------------------------------------------------------

@functools.lru_cache(maxsize=1)
def gcs_client():
    from google.cloud import storage

    return storage.Client()


# A forked process (--all_cores's workers) makes its own client: sharing the parent's
# pooled connections would interleave two processes' requests on one socket.
os.register_at_fork(after_in_child=gcs_client.cache_clear)


def gcs_blob(path: str):
    bucket, _, name = path[len("gs://"):].partition("/")
    return gcs_client().bucket(bucket).blob(name)


def _gcs_list(path: str) -> dict[str, Entry]:
    bucket, _, prefix = path[len("gs://"):].partition("/")
    prefix = prefix.rstrip("/") + "/" if prefix else ""
    blobs = gcs_client().list_blobs(bucket, prefix=prefix, delimiter="/")
    entries = {b.name[len(prefix):]: Entry(b.name[len(prefix):], "file", b.size or 0)
               for b in blobs if b.name != prefix}
    for sub in blobs.prefixes:
        name = sub[len(prefix):].rstrip("/")
        entries[name] = Entry(name, "dir")
    return entries


def _gcs_delete(paths_: list[str]) -> int:
    """Delete objects in batch requests, checking each object's answer (a missing object
    counts as deleted) and sending the failed ones again; OSError when some still fail.
    Returns how many batch requests were sent."""
    requests, pending = 0, list(paths_)
    for attempt in range(DELETE_ATTEMPTS):
        if attempt:
            time.sleep(RETRY_SECONDS * attempt)
        failed: list[tuple[str, object]] = []   # (path, its status or the batch's error)
        for i in range(0, len(pending), GCS_BATCH):
            failed += _gcs_delete_batch(pending[i:i + GCS_BATCH])
            requests += 1
        if not failed:
            return requests
        pending = [path for path, _ in failed]
    raise OSError(f"could not delete {len(pending)} objects, e.g. {pending[0]}")


def _gcs_delete_batch(chunk: list[str]) -> list[tuple[str, object]]:
    """Delete objects in one batch request: (path, its status or the batch's error) of
    each that failed (a missing object counts as deleted; a failed request, all)."""
    try:
        batch = gcs_client().batch(raise_exception=False)
        with batch:
            for path in chunk:
                gcs_blob(path).delete()
        # one (status) per deferred delete, in order; `finish` keeps them here
        return [(path, r.status_code)
                for path, r in zip(chunk, batch._responses, strict=False)
                if not (200 <= r.status_code < 300 or r.status_code == 404)]
    except Exception as e:  # the batch request itself failed: all of it again
        return [(path, str(e)) for path in chunk]


def _gcs_walk(path: str, limit: Optional[int] = None) -> list[str]:
    """Every object under the prefix `path/` (listed 1,000 to a request)."""
    bucket, _, prefix = path[len("gs://"):].partition("/")
    prefix = prefix.rstrip("/") + "/"
    return [f"gs://{bucket}/{b.name}"
            for b in gcs_client().list_blobs(bucket, prefix=prefix, max_results=limit)]


# --- both ---------------------------------------------------------------------------

def list_dir(path: str) -> dict[str, Entry]:
    """The entries directly in directory `path` by name; {} when it does not exist."""
    if is_gcs(path):
        return _gcs_list(path)
    try:
        with os.scandir(path) as it:
            return {e.name: Entry(e.name, _local_kind(e), _local_size(e)) for e in it}
    except (FileNotFoundError, NotADirectoryError):
        return {}


def _local_kind(entry: os.DirEntry) -> str:
    if entry.is_symlink():
        return "link"
    if entry.is_dir(follow_symlinks=False):
        return "dir"
    return "file" if entry.is_file(follow_symlinks=False) else "other"


def _local_size(entry: os.DirEntry) -> int:
    try:
        return entry.stat(follow_symlinks=False).st_size
    except OSError:
        return 0


def kind(path: str) -> str:
    """"missing", "file", "dir", "link" or "other" (never following a link)."""
    if is_gcs(path):
        if gcs_blob(path).exists():
            return "file"
        return "dir" if _gcs_walk(path, limit=1) else "missing"
    try:
        mode = os.lstat(path).st_mode
    except FileNotFoundError:
        return "missing"
    if stat.S_ISLNK(mode):
        return "link"
    if stat.S_ISDIR(mode):
        return "dir"
    return "file" if stat.S_ISREG(mode) else "other"


def read_bytes(path: str) -> bytes:
    if is_gcs(path):
        from google.api_core import exceptions
        try:
            return gcs_blob(path).download_as_bytes()
        except exceptions.NotFound:
            raise FileNotFoundError(path) from None
    with open(path, "rb") as f:
        return f.read()


def write_bytes(path: str, data: bytes, make_dirs: bool = True) -> None:
    """Write a small file whole (readers see the old or the new content, never half).
    `make_dirs=False`: FileNotFoundError where its local folder is gone."""
    if is_gcs(path):
        gcs_blob(path).upload_from_string(data)
        return
    write_via_temp(path, data, os.replace, make_dirs)


def write_via_temp(path: str, data: bytes, put, make_dirs: bool = True) -> None:
    """Write `data` to a temp file beside `path`, then `put(temp, path)` it into place;
    the temp file is gone afterwards, also when the write fails (a full disk: the
    OSError then names `path`, not the temp file or, as a failed write does, nothing)."""
    if make_dirs:
        os.makedirs(os.path.dirname(path), exist_ok=True)
    temp = f"{path}.{uuid.uuid4().hex}.tmp"
    try:
        with open(temp, "wb") as f:
            f.write(data)
        put(temp, path)
    except OSError as e:
        if e.filename not in (None, temp) or e.errno is None:
            raise
        raise OSError(e.errno, e.strerror, path) from e
    finally:
        try:
            os.unlink(temp)
        except FileNotFoundError:
            pass


def place(source: str, target: str, if_generation: Optional[int] = None) -> None:
    """Put a finished file of a run's folder at `target`, replacing it whole: locally one
    rename; on GCS a server-side copy, the source left for the run folder's deletion
    after the commit (batched there, not one request here), only while `target` is at
    generation `if_generation` when given (0: absent), else FileExistsError."""
    if is_gcs(source):
        from google.api_core import exceptions
        blob = gcs_blob(source)
        try:
            blob.bucket.copy_blob(blob, gcs_blob(target).bucket, gcs_blob(target).name,
                                  if_generation_match=if_generation)
        except exceptions.PreconditionFailed:
            raise FileExistsError(f"{target} changed") from None
        return
    os.replace(source, target)


def generation(path: str) -> Optional[int]:
    """A GCS object's generation (0 when absent), what `place` may be conditioned on;
    None for a local path."""
    if not is_gcs(path):
        return None
    blob = gcs_blob(path)
    found = blob.bucket.get_blob(blob.name)
    return 0 if found is None else found.generation


def make_dirs(path: str) -> None:
    if not is_gcs(path):
        os.makedirs(path, exist_ok=True)


# --- deleting ----------------------------------------------------------------------

def _check_inside(path: str, root: str) -> None:
    """Refuse to delete outside `root`, or through a symbolic link below it."""
    normal = path if is_gcs(path) else os.path.normpath(path)
    if not paths.is_inside(normal, root) or normal == root or "/../" in f"{path}/":
        raise ValueError(f"refusing to delete {path}: not inside {root}")
    if is_gcs(path):
        return
    current = root
    for part in os.path.relpath(path, root).split(os.sep)[:-1]:
        current = os.path.join(current, part)
        if os.path.islink(current) or not os.path.isdir(current):
            raise ValueError(f"refusing to delete {path}: {current} is not a directory")


def delete_files(paths_: Iterable[str], root: str) -> int:
    """Delete these files (literal names; links themselves, never their targets);
    missing ones are skipped, a failed delete is tried again, then raises OSError.
    Returns the GCS batch requests sent (0 locally)."""
    paths_ = list(paths_)
    for path in paths_:
        _check_inside(path, root)
    if paths_ and is_gcs(paths_[0]):
        return _gcs_delete(paths_)
    for path in paths_:
        _retry(_unlink, path)
    return 0


def _unlink(path: str) -> None:
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass


def _retry(function, path: str) -> None:
    for attempt in range(DELETE_ATTEMPTS):
        try:
            return function(path)
        except OSError:
            if attempt == DELETE_ATTEMPTS - 1:
                raise
            time.sleep(RETRY_SECONDS * (attempt + 1))


def delete_tree(path: str, root: str, last: Optional[str] = None) -> int:
    """Delete directory `path` and everything under it, which must lie inside `root`;
    the file `last` directly in it, if given, only after everything else (a run folder's
    run.json: while it is there, the folder proves whose its listed files are).
    On GCS: list the prefix, delete in batches (one request per 100 objects). Locally:
    never through a link (the directory must be a real one; links inside are unlinked,
    not followed). Every delete is checked (OSError). Returns the GCS requests sent."""
    _check_inside(path, root)
    if is_gcs(path):
        objects = _gcs_walk(path)
        final = [o for o in objects if last is not None and o == f"{path.rstrip('/')}/{last}"]
        return _gcs_delete([o for o in objects if o not in final]) + _gcs_delete(final)
    if os.path.islink(path):
        _retry(_unlink, path)
    elif os.path.isdir(path):
        _delete_local_tree(path, last)
    return 0


def _delete_local_tree(path: str, last: Optional[str]) -> None:
    """delete_tree of a real local directory: what is in it, in name order (a folder
    with all under it, a link or file unlinked), then `last`, then the directory."""
    for name in sorted(os.listdir(path)):
        if name != last:
            inner = os.path.join(path, name)
            _retry(shutil.rmtree if os.path.isdir(inner) and not os.path.islink(inner)
                   else _unlink, inner)
    if last is not None:
        _retry(_unlink, os.path.join(path, last))
    _retry(os.rmdir, path)


def walk_files(path: str) -> list[str]:
    """Every file under directory `path` (never through a link: a link is listed as a
    file); none when it is missing."""
    if is_gcs(path):
        return _gcs_walk(path)
    found = []
    for folder, dirs, files in os.walk(path):
        found += [os.path.join(folder, name) for name in files]
        found += [os.path.join(folder, name) for name in dirs
                  if os.path.islink(os.path.join(folder, name))]
    return sorted(found)


def remove_empty_dirs(dirs: Iterable[str], root: str) -> None:
    """Remove these local directories, deepest first, where empty (GCS has no folders)."""
    for path in dirs:
        if is_gcs(path) or not os.path.lexists(path):   # gone already: nothing to do
            continue
        _check_inside(path, root)
        try:
            os.rmdir(path)
        except OSError:
            pass
