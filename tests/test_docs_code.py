"""Every ```python block of README.md and docs/*.md runs as it is, as tests/test_readme.py
checks the flags: a block a user copies must not end in a NameError.

A block runs in a fresh interpreter, in a folder whose `out/` is the dataset the README's
first command makes (its sample, windows of 100 x 200), after the earlier blocks of its
page whose names it uses (as a reader of the page has run them), with the names a
trainer's own loop has (`GIVEN`). A block that cannot run here has a marker on the line
before it, which the static tests below hold to account:

    <!-- not run: why (a real bucket, a GPU, ...) -->
    <!-- run by: tests/test_x.py -->     (which runs it with docs_code(page, heading[, i]))

Every block, run or not, must compile; a block that runs imports every module it uses
(a reader copies one block: the clips block once used `torch` and `readers` that only
blocks above it imported), and names nothing else that neither it, an earlier block of
its page nor `GIVEN` defines."""
from __future__ import annotations

import builtins
import dataclasses
import os
import re
import shlex
import subprocess
import symtable
import sys
from typing import Optional

import pytest
from helpers import assert_verified

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PAGES = ["README.md", *sorted(os.path.join("docs", name)
                              for name in os.listdir(os.path.join(ROOT, "docs"))
                              if name.endswith(".md"))]
# The names a trainer's loop has of its own, as the blocks use them, and what they are
# here: one process, the first epoch, no resume; a model and optimizer as tf.train
# checkpoints take them (any trackable).
GIVEN = {"epoch": "0", "epochs": "1", "rank": "0", "world": "1", "host": "0", "hosts": "1",
         "resume": "0", "model": "__import__('tensorflow').Module()",
         "optimizer": "__import__('tensorflow').Module()"}
_MARKER = re.compile(r"<!-- (not run|run by): (.*?) -->")
_FENCE = re.compile(r"^```python\n(.*?)^```$", re.S | re.M)


@dataclasses.dataclass
class Block:
    """A ```python block: where it is, what it says, its marker, the names it binds at
    the top of its module (`imports`: those of them it imports) and those it uses
    without binding them."""
    page: str
    line: int
    heading: str
    index: int              # its place among the blocks under its heading
    code: str
    marker: Optional[tuple[str, str]]
    binds: frozenset
    imports: frozenset
    uses: frozenset

    @property
    def where(self) -> str:
        return f"{self.page}:{self.line}"


def _names(code: str, where: str) -> tuple[frozenset, frozenset, frozenset]:
    """(names bound at module level, those of them imported, names used but bound
    nowhere in `code`)."""
    table = symtable.symtable(code, where, "exec")
    binds = {s.get_name() for s in table.get_symbols() if s.is_local()}
    imports = {s.get_name() for s in table.get_symbols() if s.is_imported()}
    uses = {s.get_name() for s in table.get_symbols() if s.is_referenced() and not s.is_local()}

    def free(scope: symtable.SymbolTable) -> None:
        for child in scope.get_children():
            uses.update(s.get_name() for s in child.get_symbols()
                        if s.is_global() and s.is_referenced())
            free(child)

    free(table)
    return (frozenset(binds), frozenset(imports),
            frozenset(uses - binds - set(dir(builtins)) - {"__name__"}))


def _blocks(page: str) -> list[Block]:
    with open(os.path.join(ROOT, page)) as f:
        text = f.read()
    found, under = [], {}
    for match in _FENCE.finditer(text):
        before = text[:match.start()]
        line = before.count("\n") + 1
        headings = re.findall(r"^#+ (.+)$", before, re.M)
        heading = headings[-1] if headings else ""
        previous = before.rstrip("\n").rsplit("\n", 1)[-1]
        marker = _MARKER.fullmatch(previous.strip())
        index = under[heading] = under.get(heading, -1) + 1
        found.append(Block(page, line, heading, index, match.group(1),
                           marker and (marker.group(1), marker.group(2).strip()),
                           *_names(match.group(1), f"{page}:{line}")))
    return found


BLOCKS = [block for page in PAGES for block in _blocks(page)]
RUN = [block for block in BLOCKS if block.marker is None]


def _program(block: Block) -> str:
    """The block, after the earlier blocks of its page that bind the names it uses (and
    theirs, in the page's order), after the `GIVEN` names they use. AssertionError
    naming a name nothing binds, or one only a block that does not run here binds."""
    page = [b for b in BLOCKS if b.page == block.page and b.line <= block.line]
    needed, wanted = {block.line}, [block]
    while wanted:
        current = wanted.pop()
        for name in sorted(current.uses - set(GIVEN)):
            binders = [b for b in page if b.line < current.line and name in b.binds]
            assert binders, (f"{current.where} uses {name!r}, which neither it, an earlier "
                             f"block of {current.page} nor a trainer's loop ({sorted(GIVEN)}) "
                             "defines: import or define it in the block")
            binder = binders[-1]
            assert name not in binder.imports, (
                f"{current.where} uses {name!r}, which only {binder.where} imports: "
                "import it in this block too")
            assert binder.marker is None, (f"{current.where} uses {name!r} from "
                                           f"{binder.where}, which is not run here")
            if binder.line not in needed:
                needed.add(binder.line)
                wanted.append(binder)
    chosen = [b for b in page if b.line in needed]
    given = sorted(set(GIVEN) & {name for b in chosen for name in b.uses})
    return "".join([*(f"{name} = {GIVEN[name]}\n" for name in given),
                    *(f"# {b.where}\n{b.code}" for b in chosen)])


def test_the_pages_have_python_blocks_and_most_of_them_run():
    assert {b.page for b in BLOCKS} >= {"README.md", "docs/readers.md"}
    assert len(RUN) >= 8, [b.where for b in RUN]


@pytest.mark.parametrize("block", BLOCKS, ids=lambda b: b.where)
def test_every_block_compiles_and_every_marker_holds(block):
    compile(block.code, block.where, "exec")
    if block.marker is None:
        _program(block)       # every name it uses is bound where it runs
        return
    kind, said = block.marker
    if kind == "not run":
        assert len(said.split()) >= 3, f"{block.where}: say why it cannot run here"
        return
    path = os.path.join(ROOT, said)
    assert said.startswith("tests/") and os.path.isfile(path), f"{block.where}: {said}"
    with open(path) as f:
        test = " ".join(f.read().split())
    asks = f'docs_code("{os.path.relpath(block.page, "docs")}", "{block.heading}"'
    asks += f", {block.index})" if block.index else ")"
    assert asks in test, f"{block.where}: {said} does not run it ({asks} is not there)"


@pytest.fixture(scope="module")
def readme_out(tmp_path_factory) -> str:
    """The README's first command, less its install, run where it says: the sample and
    the dataset `out/` every block reads, checked by inspect --verify as the command
    does (and by the suite's own check)."""
    with open(os.path.join(ROOT, "README.md")) as f:
        readme = f.read()
    command = re.search(r"^pip install -e \"\.\[beam\]\" && (.+)$", readme, re.M).group(1)
    where = tmp_path_factory.mktemp("readme")
    for step in command.split(" && "):
        done = subprocess.run([sys.executable, *shlex.split(step)[1:]], cwd=where,
                              env=_env(), capture_output=True, text=True, timeout=300)
        assert done.returncode == 0, (step, done.stderr[-3000:])
    said = re.search(r"`(verify: all \d+ records of \d+ shards? are sound)`", readme).group(1)
    assert said in done.stdout, done.stdout
    assert_verified(where / "out")
    return str(where / "out")


def _env() -> dict:
    """This checkout first on the path (an installed copy may be another)."""
    return {**os.environ, "PYTHONPATH": os.pathsep.join(
        [ROOT, *filter(None, [os.environ.get("PYTHONPATH")])])}


@pytest.mark.slow
@pytest.mark.parametrize("block", RUN, ids=lambda b: b.where)
def test_every_block_runs(block, readme_out, tmp_path):
    os.symlink(readme_out, tmp_path / "out")
    script = tmp_path / "block.py"
    script.write_text(_program(block))
    done = subprocess.run([sys.executable, str(script)], cwd=tmp_path, env=_env(),
                          capture_output=True, text=True, timeout=300,
                          stdin=subprocess.DEVNULL)
    assert done.returncode == 0, f"{block.where}:\n{script.read_text()}\n{done.stderr[-3000:]}"
