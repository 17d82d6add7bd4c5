"""Every ```python block of README.md and docs/*.md runs as written: a block a user
copies must not end in a NameError, nor need data it does not name.

A block imports and defines every name it uses, or its marker names the block it goes
on from (`<!-- continues: HEADING -->`; the markers: tests/docs_blocks.py). It runs in a
fresh interpreter, after the blocks it continues (one program whose lines are the
page's: a traceback names the page's line), in a folder that holds the samples its
`data` marker names where it names them:

- `readme` (the default, at out/): the dataset the README's first command makes, run
  here as the README says (its sample: latent windows of 100 x 200, 371 of them);
- `fire`: the fire sample the examples make (examples/example_data.py): PNG frames with
  a heat-release label each, windows of 8, train and validation splits.

A block that raises fails. One that cannot run here says why (`not run`), and it too
must compile and use no name that neither it nor a block it continues defines."""
from __future__ import annotations

import builtins
import os
import re
import shlex
import subprocess
import symtable
import sys
from typing import Optional

import pytest
from docs_blocks import MARKERS, ROOT, Block, blocks, pages
from helpers import assert_verified

# The samples a `data` marker may name, and the fixture that makes each.
SAMPLES = {"readme": "readme_out", "fire": "fire_sample"}
BLOCKS = [block for page in pages() for block in blocks(page)]
RUN = [block for block in BLOCKS if block.marker("not run") is None]


def _continued(block: Block) -> Optional[Block]:
    """The block `block` continues: the last one above it, on its page, under the
    heading its `continues` marker names (None: no such block, or no marker)."""
    above = [b for b in BLOCKS if b.page == block.page and b.line < block.line
             and b.heading == block.marker("continues")]
    return above[-1] if above else None


def _chain(block: Block) -> list[Block]:
    """The blocks that run as one program for `block`: those it continues, then it."""
    chain = [block]
    while (continued := _continued(chain[0])) is not None:
        chain.insert(0, continued)
    return chain


def _data(block: Block) -> dict[str, str]:
    """Where `block`'s program finds each sample (a folder -> a SAMPLES name), as the
    first block of its chain names them (default: the README's at out/)."""
    said = _chain(block)[0].marker("data") or "readme"
    places = {}
    for item in said.split(","):
        name, _, place = item.strip().partition(" at ")
        assert name in SAMPLES, f"{block.where}: data {name!r} is none of {sorted(SAMPLES)}"
        places[(place or "out/").rstrip("/")] = name
    return places


def _names(block: Block) -> tuple[frozenset, frozenset]:
    """(the names `block` binds at the top of its module, the names it uses without
    binding them: a builtin aside)."""
    table = symtable.symtable(block.code, block.where, "exec")
    binds = {s.get_name() for s in table.get_symbols() if s.is_local()}
    uses = {s.get_name() for s in table.get_symbols() if s.is_referenced() and not s.is_local()}

    def free(scope: symtable.SymbolTable) -> None:
        for child in scope.get_children():
            uses.update(s.get_name() for s in child.get_symbols()
                        if s.is_global() and s.is_referenced())
            free(child)

    free(table)
    return frozenset(binds), frozenset(uses - binds - set(dir(builtins)) - {"__name__"})


def _program(chain: list[Block]) -> str:
    """The chain's code, each block's lines on its page's lines (blank lines between)."""
    lines: list[str] = []
    for block in chain:
        lines += [""] * (block.line - len(lines))     # its code starts after its fence
        lines += block.code.splitlines()
    return "\n".join(lines) + "\n"


def test_every_python_block_of_every_page_is_found():
    """A fence the finder missed (```py, a python3 tag) would be a block never run."""
    for page in pages():
        with open(os.path.join(ROOT, page)) as f:
            fences = re.findall(r"^ *```py", f.read(), re.M)
        assert len(fences) == len(blocks(page)), f"{page}: a ```py fence is not ```python"
    assert {b.page for b in RUN} >= {"README.md", "docs/readers.md"}
    assert len(RUN) >= 3 * len(BLOCKS) // 4, [b.where for b in BLOCKS if b not in RUN]


@pytest.mark.parametrize("block", BLOCKS, ids=lambda b: b.where)
def test_every_block_compiles_defines_what_it_uses_and_its_markers_hold(block):
    compile(block.code, block.where, "exec")
    kinds = [kind for kind, _ in block.markers]
    assert set(kinds) <= set(MARKERS) and len(set(kinds)) == len(kinds), (
        f"{block.where}: markers {kinds}, each at most once of {MARKERS}")
    if block.marker("continues") is not None:
        assert _continued(block), (f"{block.where} continues {block.marker('continues')!r}, "
                                   f"but no block above it on {block.page} is under it")
        assert block.marker("data") is None, (
            f"{block.where}: a block runs on the data of the block it continues: name it there")
    chain = _chain(block)
    bound = frozenset().union(*(_names(b)[0] for b in chain))
    missing = sorted(_names(block)[1] - bound)
    assert not missing, (f"{block.where} uses {missing}, which neither it nor a block it "
                         "continues defines: import or define them in the block, or mark "
                         "the block it goes on from (<!-- continues: HEADING -->)")
    if block.marker("not run") is None:
        assert all(b.marker("not run") is None for b in chain), (
            f"{block.where} continues a block that is not run here")
        _data(block)
    else:
        assert len(block.marker("not run").split()) >= 3, f"{block.where}: say why it cannot run"
    test = block.marker("run by")
    if test is not None:
        path = os.path.join(ROOT, test)
        assert test.startswith("tests/") and os.path.isfile(path), f"{block.where}: {test}"
        with open(path) as f:
            text = " ".join(f.read().split())
        asks = f'docs_code("{os.path.relpath(block.page, "docs")}", "{block.heading}"'
        asks += f", {block.index})" if block.index else ")"
        assert asks in text, f"{block.where}: {test} does not run it ({asks} is not there)"


@pytest.fixture(scope="module")
def readme_out(tmp_path_factory) -> str:
    """The README's first command, less its install, run where it says: the sample and
    the dataset `out/` the README's blocks read, checked by inspect --verify as the
    command does (and by the suite's own check)."""
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


# A block runs in the program of the last block that continues it.
LAST = [block for block in RUN if not any(
    block in _chain(other)[:-1] for other in RUN if other.marker("continues"))]


@pytest.mark.slow
@pytest.mark.parametrize("block", LAST, ids=lambda b: b.where)
def test_every_block_runs_on_the_data_it_names(block, request, tmp_path):
    for place, sample in _data(block).items():
        os.symlink(request.getfixturevalue(SAMPLES[sample]), tmp_path / place)
    script = tmp_path / f"{os.path.basename(block.page)}.py"
    script.write_text(_program(_chain(block)))
    done = subprocess.run([sys.executable, str(script)], cwd=tmp_path, env=_env(),
                          capture_output=True, text=True, timeout=300,
                          stdin=subprocess.DEVNULL)
    assert done.returncode == 0, (f"{' then '.join(b.where for b in _chain(block))}, "
                                  f"on {_data(block)}:\n{done.stderr[-3000:]}")
