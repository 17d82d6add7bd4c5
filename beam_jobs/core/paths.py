"""Path spellings: one normal form per place, glob semantics, and ids that survive a move.

Every check on the output directory (what it holds, whether an input lies in it) runs on
the normal form, so `out`, `out/`, `./out//` and a symlink to it are the same directory,
and a name with glob characters (`out[1]`) is a name, never a pattern.
"""
from __future__ import annotations

import os
import posixpath
import re
from typing import Sequence

from beam_jobs.core import ids
from readers.format import is_remote  # noqa: F401 (the one test, the readers' too)

GLOB_CHARS = re.compile(r"[*?\[]")


def normalize(path: str) -> str:
    """The canonical spelling of a directory or file path; ValueError when empty.

    Local paths become absolute and resolved (symlinks of the path itself followed, so
    that two spellings of one directory compare equal); `gs://b//a/` becomes `gs://b/a`.
    """
    if not path or not path.strip():
        raise ValueError("is empty")
    if not is_remote(path):
        return os.path.realpath(os.path.expanduser(path.removeprefix("file://")))
    scheme, rest = path.split("://", 1)
    parts = [p for p in rest.split("/") if p not in ("", ".")]
    if not parts:
        raise ValueError(f"names no bucket: {path!r}")
    if ".." in parts:
        raise ValueError(f"must not contain '..': {path!r}")
    return f"{scheme}://{'/'.join(parts)}"


def join(directory: str, *names: str) -> str:
    return posixpath.join(directory, *names) if is_remote(directory) else os.path.join(
        directory, *names)


def is_inside(path: str, directory: str) -> bool:
    """Whether normalized `path` is `directory` or lies under it."""
    return path == directory or path.startswith(directory.rstrip("/") + "/")


def fixed_prefix(pattern: str) -> str:
    """The directory part of a glob before its first glob character: 'a/b*/c' -> 'a'."""
    match = GLOB_CHARS.search(pattern)
    head = pattern if match is None else pattern[:match.start()]
    return head.rsplit("/", 1)[0] if "/" in head else ""


def glob_regex(pattern: str) -> re.Pattern:
    """A regex matching what Beam's and fsspec's globs match: `*` and `?` stay within one
    path segment, `**` crosses segments, `[...]` is a character class."""
    out, i = [], 0
    while i < len(pattern):
        c = pattern[i]
        if pattern.startswith("**", i):
            out.append(".*")
            i += 2
            continue
        if c == "*":
            out.append("[^/]*")
        elif c == "?":
            out.append("[^/]")
        elif c == "[":
            end = pattern.find("]", i + 2)
            if end < 0:
                out.append(re.escape(c))
            else:
                body = pattern[i + 1:end]
                body = "^" + body[1:] if body.startswith("!") else body
                out.append(f"[{body.replace(chr(92), chr(92) * 2)}]")
                i = end
        else:
            out.append(re.escape(c))
        i += 1
    return re.compile("".join(out) + r"\Z")


def default_id(path: str, root: str, strip_suffix: bool) -> str:
    """A video's id from its file: the path relative to `root` (the common fixed prefix
    of the input globs), so that `cam1/0001.mp4` and `cam2/0001.mp4` stay apart and the
    ids survive moving the whole tree. Video files drop their suffix. The id is valid
    Unicode in NFC (`ids.video_id`), whatever bytes the file's name holds."""
    relative = path[len(root):] if root and is_inside(path, root) else path
    relative = relative.lstrip("/")
    if strip_suffix:
        stem, _ = posixpath.splitext(relative)
        relative = stem or relative
    return ids.video_id(relative)


def common_root(patterns: Sequence[str]) -> str:
    """The deepest directory that holds every pattern's fixed prefix."""
    prefixes = [fixed_prefix(p) for p in patterns]
    if not prefixes or any(not p for p in prefixes):
        return ""
    split = [p.split("/") for p in prefixes]
    common = []
    for parts in zip(*split, strict=False):
        if len(set(parts)) != 1:
            break
        common.append(parts[0])
    return "/".join(common)
