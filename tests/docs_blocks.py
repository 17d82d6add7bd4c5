"""The ```python blocks of README.md and docs/*.md and the markers above them: what
tests/test_docs_code.py checks and runs, and what `docs_code` hands a test that runs a
block on data of its own. The standard library only (tests/readers_only/ imports it).

A marker is an HTML comment (a rendered page does not show it) on a line of its own
right above a block, or above another marker of it:

    <!-- data: fire -->                    out/ is the fire sample (default: the README's)
    <!-- data: readme at a/, fire at b/ --> each sample where the block reads it
    <!-- continues: HEADING -->            it goes on from the last block above it under
                                           HEADING (its names): the two run as one program
    <!-- not run: why -->                  it cannot run here (a real bucket, a GPU, ...)
    <!-- run by: tests/test_x.py -->       that test runs it too, on data of its own, and
                                           checks what it gives: docs_code(page, heading[, i])
"""
from __future__ import annotations

import dataclasses
import os
import re
from typing import Optional

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MARKERS = ("data", "continues", "not run", "run by")
_MARKER = re.compile(r"<!-- ([a-z][a-z ]*): (.*?) -->")
# a fence of python code, indented or not (in a list), to the fence that closes it
_FENCE = re.compile(r"^( *)```python[ \t]*\n(.*?)^\1```[ \t]*$", re.S | re.M)
_HEADING = re.compile(r"^#+ (.+)$", re.M)


@dataclasses.dataclass(frozen=True)
class Block:
    """A ```python block: its page, the line of its opening fence, the heading it is
    under and its place among that heading's blocks (0: the first), its code, and its
    markers as (kind, text), top to bottom."""
    page: str
    line: int
    heading: str
    index: int
    code: str
    markers: tuple[tuple[str, str], ...]

    @property
    def where(self) -> str:
        return f"{self.page}:{self.line}"

    def marker(self, kind: str) -> Optional[str]:
        """The text of its `kind` marker, or None."""
        return next((text for k, text in self.markers if k == kind), None)


def pages() -> list[str]:
    """README.md and every docs/*.md, relative to the checkout."""
    docs = os.path.join(ROOT, "docs")
    return ["README.md", *sorted(os.path.join("docs", name) for name in os.listdir(docs)
                                 if name.endswith(".md"))]


def blocks(page: str) -> list[Block]:
    """Every ```python block of `page` (relative to the checkout), in its order."""
    with open(os.path.join(ROOT, page)) as f:
        text = f.read()
    found, under = [], {}
    for match in _FENCE.finditer(text):
        before = text[:match.start()]
        headings = _HEADING.findall(before)
        heading = headings[-1].strip() if headings else ""
        index = under[heading] = under.get(heading, -1) + 1
        indent = len(match.group(1))
        code = "".join(line[indent:] for line in match.group(2).splitlines(keepends=True))
        found.append(Block(page, before.count("\n") + 1, heading, index, code,
                           _markers(before)))
    return found


def _markers(before: str) -> tuple[tuple[str, str], ...]:
    """The markers on the lines right above a block (`before`: the page up to it)."""
    markers = []
    for line in reversed(before.rstrip("\n").split("\n")):
        marker = _MARKER.fullmatch(line.strip())
        if marker is None:
            break
        markers.insert(0, (marker.group(1), marker.group(2).strip()))
    return tuple(markers)


def docs_code(page: str, heading: str, index: int = 0) -> str:
    """The `index`-th ```python block (the first: 0) under `heading` of docs/`page`: the
    code the docs show, for a test to run as it is (tests/test_docs_code.py checks that
    a block marked `run by` a test file is asked for so there)."""
    return [block for block in blocks(os.path.join("docs", page))
            if block.heading == heading][index].code
