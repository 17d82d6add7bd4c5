"""Where readers.inspect writes its page (--report) or picture (--out): `check`, made
before anything is read, and `save`."""
from __future__ import annotations

import os
import posixpath
import secrets

from readers.files import is_local


def check(dataset: str, out: str) -> None:
    """ValueError saying in a line why inspect will not write its page or picture to
    `out`. Nothing inside the dataset's directory, whatever the name (inspect reads a
    dataset and never writes into it): local paths are compared with their symbolic
    links and `..` resolved, a store's URLs normalised. Nor an empty path, a directory,
    or a local folder that is not there (inspect makes none)."""
    import fsspec

    if not out:
        raise ValueError("an empty path: name a file")
    try:
        fs, where = _innermost(*fsspec.core.url_to_fs(out))
        dataset_fs, root = _innermost(*fsspec.core.url_to_fs(dataset))
    except (ValueError, ImportError) as e:   # no such scheme, or its library missing
        raise ValueError(str(e).splitlines()[0]) from None
    if is_local(fs):
        where = _local_file(out, where)
    if type(fs) is not type(dataset_fs):
        return
    root = (os.path.realpath(root) if is_local(dataset_fs) else posixpath.normpath(root))
    if not is_local(fs):
        where = posixpath.normpath(where)
    if where == root or where.startswith(root.rstrip("/") + "/"):
        raise ValueError(f"{out} is inside the dataset directory {dataset}: inspect never "
                         "writes into a dataset; name a path outside it")


def _local_file(out: str, where: str) -> str:
    """`where`, the local path of `out`, with its symbolic links and `..` resolved;
    ValueError for a directory, or a file in a folder that is not there."""
    folder, where = os.path.dirname(where) or ".", os.path.realpath(where)
    if os.path.isdir(where):
        raise ValueError(f"{out} is a directory: name a file")
    if not os.path.isdir(os.path.dirname(where)):
        raise ValueError(f"{folder} is not a folder (inspect makes none): create it first")
    return where


def _innermost(fs, path: str):
    """The filesystem a chained URL stores on (`simplecache::gs://...`'s gs://), and
    the path on it: a cache in front changes nothing of where a file lands."""
    while getattr(fs, "fs", None) is not None:
        fs = fs.fs
    return fs, path


def save(out: str, data: bytes) -> None:
    """Write `data` to `out`, local or any fsspec URL. A local file is written beside
    where `out` leads (its symbolic links followed) and renamed over it: whole or not at
    all, and never into another name of the old file (a hard link). readers.inspect has
    checked that `out` leads outside the dataset; this keeps a hard link from getting
    past that check."""
    import fsspec

    fs, where = fsspec.core.url_to_fs(out)
    if not is_local(fs):
        with fs.open(where, "wb") as f:
            f.write(data)
        return
    where = os.path.realpath(where)
    temporary = os.path.join(os.path.dirname(where),
                             f".{os.path.basename(where)}.{secrets.token_hex(6)}.tmp")
    fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)  # the umask's mode
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.replace(temporary, where)
    except BaseException:
        os.unlink(temporary)
        raise
