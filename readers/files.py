"""A dataset directory's files, local or of any fsspec scheme, as readers.inspect's
summary, readers.inspect.verify and readers.report read them (readers.numpy has its own reads:
readers/shards.py; readers.inspect writes through readers/inspect/output.py)."""
from __future__ import annotations

import json
from typing import Iterator, Optional

from readers.file_checks import NotAFile, check_regular
from readers.format import videos_file

MAX_WHOLE = 64 << 20    # a side file read whole (dataset_info.json: a few MB at 40,000 shards)


class DatasetFiles:
    """A dataset directory's files through fsspec: local, gs:// (with gcsfs), any scheme;
    what the summary, --verify and the report ask of them."""

    def __init__(self, path: str):
        import fsspec

        self.fs, root = fsspec.core.url_to_fs(path)
        self.root = root.rstrip("/")

    def path(self, name: str) -> str:
        return f"{self.root}/{name}"

    def reader(self, name: str, compression: Optional[str] = None):
        """A file for reading in binary, read ahead in 1 MiB blocks on a store: gcsfs's
        own default cache asks for each small read (a record's header, its data, its
        CRC) in a request of its own at first. NotAFile when it is not a regular file."""
        self.check_regular(name)
        return self.fs.open(self.path(name), "rb", compression=compression,
                            block_size=1 << 20, cache_type="readahead")

    def sizes(self) -> dict[str, int]:
        """Every file's size by name, from one listing (pages of 1,000 names on GCS),
        not one request per shard."""
        return {entry["name"].rstrip("/").rsplit("/", 1)[-1]: int(entry.get("size") or 0)
                for entry in self.fs.ls(self.root, detail=True)}

    def rows(self, name: str) -> Iterator[dict]:
        """The JSON objects of a side file, one line at a time (blank lines skipped);
        ValueError naming the file and line of one that is not a JSON object, or longer
        than videos_file.MAX_LINE (so no line is held whole, however long)."""
        try:
            for number, line in videos_file.lines(lambda: self.reader(name)):
                if not line.strip():
                    continue
                try:
                    row = json.loads(line)
                except ValueError:    # not UTF-8, or not JSON
                    row = None
                if not isinstance(row, dict):
                    raise ValueError(f"line {number} is not a JSON object")
                yield row
        except NotAFile:
            raise              # it names the file whole
        except ValueError as e:
            raise ValueError(f"{name}: {e}") from None

    def read_whole(self, name: str, limit: int = MAX_WHOLE) -> bytes:
        """A side file held whole, refused (ValueError) when it is not a regular file or
        is larger than `limit` bytes: only `limit` + 1 bytes are ever read."""
        with self.open(name) as f:
            data = f.read(limit + 1)
        if len(data) > limit:
            raise ValueError(f"{name} is larger than {limit:,} bytes")
        return data

    def exists(self, name: str) -> bool:
        return self.fs.exists(self.path(name))

    def size(self, name: str) -> int:
        return self.fs.size(self.path(name))

    def open(self, name: str, mode: str = "rb", compression: Optional[str] = None):
        """`name` opened as fsspec opens it; NotAFile when it is not a regular file."""
        self.check_regular(name)
        return self.fs.open(self.path(name), mode, compression=compression)

    def check_regular(self, name: str) -> None:
        """NotAFile when a local dataset's `name` is not a regular file (a FIFO, whose
        open would wait forever; a directory): the shards' check (readers.file_checks),
        made before every open here, side files' too. Objects on a store are files."""
        if is_local(self.fs):
            check_regular(self.root, name)


def is_local(fs) -> bool:
    """Whether an fsspec filesystem is the local one (its files can be FIFOs and links)."""
    return bool(fs.protocol) and "file" in fs.protocol
