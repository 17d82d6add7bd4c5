"""Compare and swap on one small file, local or on GCS: the lease's only primitives.

Each call takes or returns a token, the version of the file it saw: on GCS the object's
generation (every write is an upload with a generation precondition), on local disk its
inode, mtime and size (a create is a link, which fails where the target exists, and a
replace or delete first checks the token). So of two runs racing for one lease, one wins
and the other learns it lost; a lease is never seen half-written.
"""
from __future__ import annotations

import os
import uuid
from typing import Optional

from beam_jobs.core import storage


def create_exclusive(path: str, data: bytes) -> Optional[str]:
    """Create `path` holding `data` unless it exists; its token, or None if it existed."""
    if storage.is_gcs(path):
        from google.api_core import exceptions
        blob = storage.gcs_blob(path)
        try:
            blob.upload_from_string(data, if_generation_match=0)
        except exceptions.PreconditionFailed:
            return None
        return str(blob.generation)
    # Written whole, then linked into place (a link fails where the target exists): no
    # other run ever reads it empty or half-written and takes it for a broken lease.
    try:
        storage.write_via_temp(path, data, os.link)
    except (FileExistsError, FileNotFoundError):  # not found: the lease's holder removed
        return None                                # the temp file as a leftover; try again
    return _local_token(path)


def _local_token(path: str) -> str:
    st = os.stat(path)
    return f"{st.st_ino}:{st.st_mtime_ns}:{st.st_size}"


def read_with_token(path: str) -> Optional[tuple[bytes, str]]:
    """(content, token) of `path`, or None when it does not exist."""
    if storage.is_gcs(path):
        from google.api_core import exceptions
        bucket, _, name = path[len("gs://"):].partition("/")
        for _ in range(5):  # the object may change between its metadata and its data
            blob = storage.gcs_client().bucket(bucket).get_blob(name)
            if blob is None:
                return None
            generation = blob.generation
            try:
                return blob.download_as_bytes(if_generation_match=generation), str(generation)
            except (exceptions.PreconditionFailed, exceptions.NotFound):
                continue
        raise OSError(f"{path} keeps changing")
    try:
        with open(path, "rb") as f:
            data = f.read()
        return data, _local_token(path)
    except FileNotFoundError:
        return None


def replace_if(path: str, data: bytes, token: str) -> Optional[str]:
    """Replace `path` with `data` if it is still at `token`; the new token, or None."""
    if storage.is_gcs(path):
        from google.api_core import exceptions
        blob = storage.gcs_blob(path)
        try:
            blob.upload_from_string(data, if_generation_match=int(token))
        except (exceptions.PreconditionFailed, exceptions.NotFound):
            return None
        return str(blob.generation)
    current = read_with_token(path)
    if current is None or current[1] != token:
        return None
    storage.write_bytes(path, data)
    return _local_token(path)


def delete_if(path: str, token: str) -> bool:
    """Delete `path` if it is still at `token`."""
    if storage.is_gcs(path):
        from google.api_core import exceptions
        try:
            storage.gcs_blob(path).delete(if_generation_match=int(token))
        except (exceptions.PreconditionFailed, exceptions.NotFound):
            return False
        return True
    current = read_with_token(path)
    if current is None or current[1] != token:
        return False
    # Move it aside first: of two runs deleting the same stale lease, one wins.
    aside = f"{path}.{uuid.uuid4().hex}.stale"
    try:
        os.rename(path, aside)
    except FileNotFoundError:
        return False
    try:
        os.remove(aside)
    except FileNotFoundError:   # the lease's holder removed it as a leftover
        pass
    return True
