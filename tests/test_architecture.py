"""The house as docs/contributing.md draws it: every module in one part, every import
between parts an arrow of its table (and every arrow used), no cycle of the table's
arrows, no import cycle (type-only and function-level imports included), no private name
used across modules, a main module the size of Beam's wordcount, and small tops of the
job's package and of the readers' folder."""
import ast
import os
import re

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PACKAGES = ("beam_jobs", "readers")


def _modules() -> dict[str, str]:
    """Dotted name -> path of every module of the project's packages."""
    found = {}
    for package in PACKAGES:
        for folder, _, files in os.walk(os.path.join(ROOT, package)):
            for name in files:
                if name.endswith(".py"):
                    path = os.path.join(folder, name)
                    dotted = os.path.relpath(path, ROOT)[:-3].replace(os.sep, ".")
                    found[dotted.removesuffix(".__init__")] = path
    return found


MODULES = _modules()


def _imports(path: str) -> list[tuple[str, list[str], int]]:
    """(imported project module, names taken from it, line) of every import statement in
    a module: top-level, in functions, under TYPE_CHECKING alike. `from a import b` is an
    import of module a.b when there is one."""
    found = []
    for node in ast.walk(ast.parse(open(path).read(), path)):
        if isinstance(node, ast.Import):
            found += [(a.name, [], node.lineno) for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            for a in node.names:
                sub = f"{node.module}.{a.name}"
                found.append((sub, [], node.lineno) if sub in MODULES
                             else (node.module, [a.name], node.lineno))
    return [(module, names, line) for module, names, line in found if module in MODULES]


IMPORTS = {module: _imports(path) for module, path in MODULES.items()}


def _parts() -> tuple[dict[str, list[str]], dict[str, set[str]]]:
    """contributing.md's table: part -> its paths, part -> the parts it may import."""
    with open(os.path.join(ROOT, "docs", "contributing.md")) as f:
        text = f.read()
    table = text.split("## The parts and their arrows", 1)[1].split("\n## ", 1)[0]
    where, may = {}, {}
    for row in re.findall(r"^\| (\w+) \| (`[^|]*`) \|([^|]*)\|$", table, re.M):
        part, paths, allowed = row
        where[part] = re.findall(r"`([^`]+)`", paths)
        may[part] = {p.strip() for p in allowed.split(",") if p.strip()}
    return where, may


WHERE, MAY = _parts()


def part_of(module: str) -> str:
    """The part a module belongs to: the one whose most specific path holds it."""
    path = os.path.relpath(MODULES[module], ROOT)
    matches = [(len(p), part) for part, paths in WHERE.items() for p in paths
               if path == p or (p.endswith("/") and path.startswith(p))]
    assert matches, f"{path} is in no part of docs/contributing.md"
    return max(matches)[1]


def test_every_module_is_in_one_part_and_every_part_has_modules():
    assert WHERE and set(WHERE) == set(MAY)
    assert all(part in WHERE for allowed in MAY.values() for part in allowed), MAY
    assert {part_of(m) for m in MODULES} == set(WHERE)


def test_imports_between_parts_are_the_arrows_of_the_table():
    used, wrong = set(), []
    for module, imports in IMPORTS.items():
        for imported, _, line in imports:
            arrow = (part_of(module), part_of(imported))
            if arrow[0] == arrow[1]:
                continue
            used.add(arrow)
            if arrow[1] not in MAY[arrow[0]]:
                wrong.append(f"{MODULES[module]}:{line} imports {imported} ({arrow[0]} -> "
                             f"{arrow[1]})")
    assert not wrong, wrong
    drawn = {(part, other) for part, allowed in MAY.items() for other in allowed}
    assert drawn == used, f"arrows the table draws that no import uses: {drawn - used}"


def test_the_arrows_of_the_table_have_no_cycle():
    """Parts whose arrows reach no part left are taken away, level by level (the bottom
    of the drawing first): a cycle would leave parts that none of them can leave."""
    left = set(MAY)
    while left:
        bottom = {part for part in left if not MAY[part] & left}
        assert bottom, f"the arrows of these parts reach a cycle: {sorted(left)}"
        left -= bottom


def test_no_import_cycle():
    """Tarjan's strongly connected components over every import edge."""
    graph = {m: sorted({i for i, _, _ in imports} - {m}) for m, imports in IMPORTS.items()}
    index, low, stack, on_stack, cycles = {}, {}, [], set(), []

    def visit(node):
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for nxt in graph[node]:
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in on_stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            component = []
            while True:
                top = stack.pop()
                on_stack.discard(top)
                component.append(top)
                if top == node:
                    break
            if len(component) > 1:
                cycles.append(sorted(component))

    for node in graph:
        if node not in index:
            visit(node)
    assert not cycles, cycles


def test_no_private_name_is_used_across_modules():
    """Neither `from m import _name` nor `m._name` on a project module imported as m."""
    wrong = []
    for path in MODULES.values():
        tree = ast.parse(open(path).read(), path)
        aliases = {}
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and node.module and not node.level:
                for a in node.names:
                    sub = f"{node.module}.{a.name}"
                    if sub in MODULES:
                        aliases[a.asname or a.name] = sub
                    elif (node.module in MODULES and a.name.startswith("_")
                          and not a.name.startswith("__")):
                        wrong.append(f"{path}:{node.lineno} imports {node.module}.{a.name}")
            elif isinstance(node, ast.Import):
                aliases.update({a.asname: a.name for a in node.names
                                if a.asname and a.name in MODULES})
        for node in ast.walk(tree):
            if (isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name)
                    and node.value.id in aliases and node.attr.startswith("_")
                    and not node.attr.startswith("__")):
                wrong.append(f"{path}:{node.lineno} uses {aliases[node.value.id]}.{node.attr}")
    assert not wrong, wrong


def test_the_main_module_reads_like_wordcount_and_the_top_is_small():
    with open(MODULES["beam_jobs.make_shards"]) as f:
        assert len(f.read().splitlines()) <= 150
    top = [n for n in os.listdir(os.path.join(ROOT, "beam_jobs"))
           if n.endswith(".py") and n != "__init__.py"]
    assert len(top) <= 8, top


def test_the_readers_show_their_parts_in_folders():
    """At most 12 modules at the top of readers/ (its __init__.py counted): what both
    readers share and their API; each reader, the inspection and the report have a
    folder."""
    top = [n for n in os.listdir(os.path.join(ROOT, "readers")) if n.endswith(".py")]
    assert len(top) <= 12, top


@pytest.mark.parametrize("module", sorted(m for m in MODULES if m.startswith("readers")))
def test_the_readers_never_import_the_job(module):
    assert not [i for i, _, _ in IMPORTS[module] if i.startswith("beam_jobs")]
