"""A dataset directory's files, local or of any fsspec scheme, as readers.inspect's
summary, readers.verify and readers.report read them (readers.numpy has its own reads:
readers/shards.py)."""
from __future__ import annotations

import json
from typing import Iterator, Optional

from readers.selection import NotAFile, check_regular


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
        CRC) in a request of its own at first."""
        return self.fs.open(self.path(name), "rb", compression=compression,
                            block_size=1 << 20, cache_type="readahead")

    def sizes(self) -> dict[str, int]:
        """Every file's size by name, from one listing (pages of 1,000 names on GCS),
        not one request per shard."""
        return {entry["name"].rstrip("/").rsplit("/", 1)[-1]: int(entry.get("size") or 0)
                for entry in self.fs.ls(self.root, detail=True)}

    def rows(self, name: str) -> Iterator[dict]:
        """The JSON objects of a side file, one line at a time (blank lines skipped);
        ValueError naming the file and line of one that is not a JSON object."""
        with self.reader(name) as f:
            for number, line in enumerate(f, 1):
                if not line.strip():
                    continue
                try:
                    row = json.loads(line)
                except ValueError:    # not UTF-8, or not JSON
                    row = None
                if not isinstance(row, dict):
                    raise ValueError(f"{name}: line {number} is not a JSON object")
                yield row

    def exists(self, name: str) -> bool:
        return self.fs.exists(self.path(name))

    def size(self, name: str) -> int:
        return self.fs.size(self.path(name))

    def open(self, name: str, mode: str = "rb", compression: Optional[str] = None):
        return self.fs.open(self.path(name), mode, compression=compression)

    def not_a_file(self, name: str) -> Optional[str]:
        """Why a local dataset's `name` cannot be opened as a file (a FIFO, whose open
        would wait forever; a directory), or None. Objects on a store are files."""
        if not self.fs.protocol or "file" not in self.fs.protocol:
            return None
        try:
            check_regular(self.root, name)
        except NotAFile as e:
            return str(e)
        return None
