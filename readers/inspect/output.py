"""Where readers.inspect writes its page (--report) or picture (--out): `check`, made
before anything is read, and `save`.

inspect reads a dataset and never writes into it, nor over anything but a regular file.
A chained URL is taken only through caches (`simplecache::gs://...`), unwrapped to the
URL beneath, which is what is checked and written: a cache writes through to its target
directly, so a local target behind one would be written into, not replaced.
"""
from __future__ import annotations

import logging
import os
import posixpath
import secrets
import stat
import threading
from typing import Optional

from readers.file_checks import file_kind
from readers.files import is_local

STORE_DEADLINE_S = 10   # a store's first answer: credentials, then a request


def check(dataset: str, out: str) -> None:
    """ValueError saying in a line why inspect will not write to `out`: an empty path;
    a chain of anything but caches (`zip::`, read-only here); a path inside the dataset's
    directory, whatever the name (local paths compared with their symbolic links and `..`
    resolved, a store's URLs normalised). Locally also a directory, a folder that is not
    there (inspect makes none), something there that is not a regular file (a FIFO, a
    socket, a device, or a link to one: the rename would put a file in its place), or
    one of the dataset's files under another name (a hard link); on a store, one that
    does not answer within STORE_DEADLINE_S, or a directory."""
    if not out:
        raise ValueError("an empty path: name a file")
    try:
        url = _innermost(out)
        fs_class, where = _located(url)
    except (ValueError, ImportError) as e:   # ImportError: the scheme's library missing
        raise ValueError(f"{out}: {str(e).splitlines()[0]}") from None
    if is_local(fs_class):
        _check_local_file(dataset, out, fs_class, where)
    else:
        _refuse_inside(dataset, out, fs_class, posixpath.normpath(where))
        _check_store(out, url)


def save(out: str, data: bytes) -> None:
    """Write `data` to `out` (a path `check` let through), past any cache in front. A
    store's file is written as the store writes; a local one as a new file beside where
    `out` leads (its symbolic links followed), renamed over it: whole or not at all, and
    never into another name of the old file. The new file's name is short and fixed in
    length, so that any name that fits a folder fits beside it."""
    import fsspec

    fs, where = fsspec.core.url_to_fs(_innermost(out))
    if not is_local(fs):
        with fs.open(where, "wb") as f:
            f.write(data)
        return
    where = os.path.realpath(where)
    temporary = os.path.join(os.path.dirname(where), f".inspect-{secrets.token_hex(8)}.tmp")
    fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)  # the umask's mode
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.replace(temporary, where)
    except BaseException:
        os.unlink(temporary)
        raise


def _innermost(url: str) -> str:
    """The URL a chained one writes to: its last link, where each link before it names
    a cache and nothing else (`simplecache::gs://b/page.html`: gs://b/page.html).
    ValueError, in a line, for any other link (`zip://page.html::`, an unknown scheme)."""
    import fsspec
    from fsspec.implementations.cached import CachingFileSystem

    *outer, last = url.split("::")
    for link in outer:
        protocol, _, path = link.partition("://")
        if path or not issubclass(fsspec.get_filesystem_class(protocol), CachingFileSystem):
            raise ValueError(f"inspect writes through caches only (simplecache::URL), not "
                             f"{link}::")
    return last


def _located(url: str) -> tuple[type, str]:
    """The filesystem class of a URL without a chain, and the path on it as fsspec
    makes it (a local one absolute), without making the filesystem: for gs://, that
    looks for credentials, which takes 15 s where there are none and no network."""
    import fsspec

    fs_class = fsspec.get_filesystem_class(fsspec.core.split_protocol(url)[0] or "file")
    return fs_class, fs_class._strip_protocol(url)


def _check_local_file(dataset: str, out: str, fs_class: type, where: str) -> None:
    """`check` of `where`, a local path (`fs_class`: fsspec's local filesystem)."""
    folder, where = os.path.dirname(where), os.path.realpath(where)
    if os.path.isdir(where):
        raise ValueError(f"{out} is a directory: name a file")
    if not os.path.isdir(os.path.dirname(where)):
        raise ValueError(f"{folder} is not a folder (inspect makes none): create it first")
    root = _refuse_inside(dataset, out, fs_class, where)
    try:
        found = os.stat(where)
    except FileNotFoundError:
        return   # a new file
    except OSError as e:     # a loop of links, a folder it may not look into
        raise ValueError(f"{out}: {e.strerror}") from None
    if not stat.S_ISREG(found.st_mode):
        raise ValueError(f"{out} is {file_kind(found.st_mode)}, not a regular file: inspect "
                         "writes a new file or over a regular one")
    name = _same_file_in(root, found) if root else None
    if name:
        raise ValueError(f"{out} is the dataset's {name} under another name (a hard link): "
                         "inspect never writes into a dataset; name a path outside it")


def _refuse_inside(dataset: str, out: str, fs_class: type, where: str) -> Optional[str]:
    """ValueError when `where`, on a filesystem of `fs_class`, is inside the dataset's
    directory; the directory (local: its links resolved), or None where the dataset is
    on a filesystem of another kind (or a URL inspect will not read: load_spec says so)."""
    try:
        dataset_class, root = _located(_innermost(dataset))
    except (ValueError, ImportError):
        return None
    if dataset_class is not fs_class:
        return None
    root = os.path.realpath(root) if is_local(fs_class) else posixpath.normpath(root)
    if where == root or where.startswith(root.rstrip("/") + "/"):
        raise ValueError(f"{out} is inside the dataset directory {dataset}: inspect never "
                         "writes into a dataset; name a path outside it")
    return root


def _same_file_in(root: str, found: os.stat_result) -> Optional[str]:
    """The name under `root` of the file that `found` is (the same device and inode: a
    hard link is the same file), every file there looked at; None if none is."""
    for folder, _, names in os.walk(root):
        for name in names:
            try:
                there = os.stat(os.path.join(folder, name))
            except OSError:    # a link that leads nowhere
                continue
            if (there.st_dev, there.st_ino) == (found.st_dev, found.st_ino):
                return os.path.relpath(os.path.join(folder, name), root)
    return None


def _check_store(out: str, url: str) -> None:
    """ValueError when the store does not answer within STORE_DEADLINE_S whether `url`
    is a directory, or says it is one. Asked in a thread of its own with logging off:
    without a network gcsfs looks for credentials (15 s), then retries each request for
    about 30 s and logs its traceback, where this line is the answer. Past the deadline
    the thread is left to end on its own, and logging stays off: the command ends with
    this line."""
    import fsspec

    answer: list = []

    def ask() -> None:
        try:
            fs, path = fsspec.core.url_to_fs(url)
            answer.append(fs.isdir(path))
        except Exception as e:   # a store's own: HTTP, auth, a bad bucket name
            answer.append(e)

    logging.disable(logging.CRITICAL)
    thread = threading.Thread(target=ask, name="inspect-asks-the-store", daemon=True)
    thread.start()
    thread.join(STORE_DEADLINE_S)
    if not answer:
        raise ValueError(f"{out}: no answer from the store in {STORE_DEADLINE_S} s "
                         "(is there a network?)")
    logging.disable(logging.NOTSET)
    if isinstance(answer[0], Exception):
        raise ValueError(f"{out}: {(str(answer[0]) or repr(answer[0])).splitlines()[0]}")
    if answer[0]:
        raise ValueError(f"{out} is a directory: name a file")
