"""--input: the patterns' files, sorted, and their one input kind (latents, manifest or
videos), decided from the files' names before any file is read."""
from __future__ import annotations

import collections
import os
from typing import Sequence

from apache_beam.io.filesystems import FileSystems

from beam_jobs.core import ids, paths

MANIFEST_SUFFIXES = (".jsonl", ".csv")
# An animated GIF is a video: every frame, at its own duration (PyAV reads them).
VIDEO_SUFFIXES = (".mp4", ".webm", ".avi", ".mov", ".mkv", ".m4v", ".mpg", ".mpeg", ".gif")
# A still image is a frame, never an input of its own: frame folders go in a manifest.
IMAGE_SUFFIXES = (".png", ".jpg", ".jpeg", ".bmp", ".tif", ".tiff", ".webp", ".apng")
_KIND_OF_FILE = {"videos": "is a video file", "manifest": "is a manifest",
                 "image": "is an image",
                 "latents": "would be read as latent TFRecords (it has no video or "
                            "manifest suffix)"}


class InputError(ValueError):
    """The inputs cannot be read as one dataset; the message says why (after `--input: `)."""


def absolute(text: str) -> str:
    """A local input glob made absolute (so ids and checks see one spelling)."""
    if paths.is_remote(text):
        return text
    return os.path.abspath(os.path.expanduser(text.removeprefix("file://")))


def resolve(patterns: Sequence[str]) -> tuple[list[tuple[str, int]], str]:
    """The (path, size) of every file of the patterns, sorted, and their one kind. A
    pattern that ends in .jsonl or .csv is one manifest; any other is a glob."""
    files, kinds = [], set()
    for pattern in patterns:
        matched = _matched(pattern)
        kinds.add(_kind(pattern, [path for path, _ in matched]))
        files += matched
    _check_one_kind(kinds, files)
    counts = collections.Counter(path for path, _ in files)
    duplicates = sorted(path for path, count in counts.items() if count > 1)
    if duplicates:
        raise InputError(f"{duplicates[0]} is matched twice")
    return sorted(files), kinds.pop()


def _matched(pattern: str) -> list[tuple[str, int]]:
    """(path, size) of a pattern's files, sorted: the manifest it names, or a glob's
    matches; InputError for a glob that cannot be listed or matches none."""
    if pattern.lower().endswith(MANIFEST_SUFFIXES):
        return [(pattern, _manifest_size(pattern))]
    try:
        found = FileSystems.match([pattern])[0].metadata_list
    except Exception as e:
        raise InputError(f"cannot list {pattern!r}: {e}") from None
    matched = sorted((m.path, m.size_in_bytes) for m in found)
    if not matched:
        raise InputError(f"no file matches {pattern!r}")
    return matched


def _check_one_kind(kinds: set[str], files: list[tuple[str, int]]) -> None:
    """InputError when the patterns' files include an image (a frame, not a video), or
    are of more than one kind."""
    if "image" in kinds:
        image = next(path for path, _ in files if _file_kind(path) == "image")
        raise InputError(f"'{ids.printable(image)}' is an image, and an image is a frame, not "
                         "a video: give frame folders in a manifest (docs/format.md)")
    if len(kinds) > 1:
        raise InputError(f"the inputs mix {' and '.join(sorted(kinds))}; give one kind")


def _file_kind(path: str) -> str:
    """The input kind a file's name says: a video or manifest suffix, else latents
    (TFRecord files go by any name: `.tfrecord`, `.gz`, `part-00001`)."""
    if path.lower().endswith(VIDEO_SUFFIXES):
        return "videos"
    if path.lower().endswith(IMAGE_SUFFIXES):
        return "image"
    return "manifest" if path.lower().endswith(MANIFEST_SUFFIXES) else "latents"


def _kind(pattern: str, files: list[str]) -> str:
    """The one kind of a pattern's files; a glob whose files are of two kinds (one
    `.m4a` among videos would make it all read as TFRecords) is refused, naming a file
    of the rarer kind and one of the other."""
    if pattern.lower().endswith(MANIFEST_SUFFIXES):
        return "manifest"
    by_kind: dict[str, list[str]] = {}
    for path in files:
        by_kind.setdefault(_file_kind(path), []).append(path)
    if len(by_kind) > 1:
        odd = min(by_kind, key=lambda kind: (len(by_kind[kind]), kind != "latents"))
        other = next(path for path in files if _file_kind(path) != odd)
        raise InputError(f"'{ids.printable(pattern)}' mixes kinds of input: "
                         f"'{ids.printable(by_kind[odd][0])}' {_KIND_OF_FILE[odd]}, unlike "
                         f"'{ids.printable(other)}'; give one kind of input per glob")
    return next(iter(by_kind))


def _manifest_size(path: str) -> int:
    """A manifest is opened with fsspec like the paths in it (memory:// too); it must be
    a regular file."""
    import fsspec

    try:
        fs, local = fsspec.core.url_to_fs(path)
        info = fs.info(local)
    except FileNotFoundError:
        raise InputError(f"no manifest at {path!r}") from None
    except Exception as e:
        raise InputError(f"cannot open {path!r}: {type(e).__name__}: {e}") from None
    if info.get("type") != "file":
        raise InputError(f"{path!r} is not a regular file")
    return int(info.get("size") or 0)
