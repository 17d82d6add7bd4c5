"""The README tells the truth where a program can check it: the job's flags and their
defaults, the reader's keywords, the constants it quotes, and the CI command."""
import argparse
import inspect
import os
import re
from fractions import Fraction

import pytest

from beam_jobs import flags, lease
from readers import dataset, inspect as inspect_cli, malloc, preview

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@pytest.fixture(scope="module")
def readme() -> str:
    with open(os.path.join(ROOT, "README.md")) as f:
        return f.read()


def _table_defaults(readme: str) -> dict[str, str]:
    """flag -> default cell of the job's flag table."""
    rows = re.findall(r"^\| `(--\w+)[^`]*` \| ([^|]+) \|", readme, re.M)
    return {flag: default.strip() for flag, default in rows}


def _readme_value(cell: str):
    """A default as the README writes it: `text` a string, off False, none... None,
    required, 1/255 a fraction, else a number."""
    if cell == "required":
        return "required"
    if cell == "off":
        return False
    if cell.startswith("none"):
        return None
    if cell.startswith("`"):
        return cell.strip("`")
    if "/" in cell:
        return float(Fraction(cell))
    return float(cell.replace(",", ""))


def _parser_value(action: argparse.Action):
    if action.required:
        return "required"
    if isinstance(action.default, bool):
        return action.default
    if isinstance(action.default, (int, float)) and not isinstance(action.default, bool):
        return float(action.default)
    return action.default


def test_every_job_flag_is_in_the_readme_with_its_default_and_back(readme):
    table = _table_defaults(readme)
    parser = flags.build_parser()
    actions = {a.option_strings[0]: a for a in parser._actions
               if a.option_strings and a.option_strings[0].startswith("--")
               and a.option_strings[0] != "--help"}
    assert sorted(table) == sorted(actions), set(table) ^ set(actions)
    for flag, action in actions.items():
        readme_default, code_default = _readme_value(table[flag]), _parser_value(action)
        if isinstance(code_default, float):
            assert readme_default == pytest.approx(code_default), flag
        else:
            assert readme_default == code_default, flag


def test_every_make_dataset_keyword_is_in_the_readme(readme):
    signature = readme[readme.index("`make_dataset(path"):]
    signature = signature[:signature.index("`:")]
    for name, parameter in inspect.signature(dataset.make_dataset).parameters.items():
        default = "" if parameter.default is inspect.Parameter.empty else parameter.default
        assert re.search(rf"\b{name}\b", signature), name
        if default != "":
            assert f"{name}={default!r}".replace("'", '"') in signature.replace(" ", ""), name


def test_the_constants_the_readme_quotes(readme):
    readme = " ".join(readme.split())   # the same words, whatever the line breaks
    assert f"a buffer of what fits in {dataset.SHUFFLE_BUFFER_BYTES >> 20} MB" in readme
    assert f"most {dataset.MAX_SHUFFLE_BUFFER} records" in readme
    assert f"interleaves up to {dataset.MAX_CYCLE_LENGTH} shards" in readme
    assert f"{dataset.PREFETCH_SHARDS} shards opened ahead" in readme
    assert (f"groups of up to {dataset.GROUP_BYTES >> 20} MB, at most {dataset.MAX_GROUP} "
            "records") in readme
    assert f"with {dataset.REMOTE_READ_BUFFER >> 20} MB reads" in readme
    assert f"blocks under {malloc.MMAP_THRESHOLD >> 20} MB" in readme
    assert f"keep up to {malloc.TRIM_THRESHOLD >> 20} MB of freed heap" in readme
    assert f"`{malloc.OPT_OUT}=0`" in readme
    assert f"renewed every {lease.HEARTBEAT_SECONDS:g} s" in readme
    assert f"not renewed for {lease.LEASE_SECONDS:g} s" in readme
    assert f"at most {inspect_cli.MAX_PREVIEW}, larger N" in readme
    assert f"more than {preview.MAX_DIMS} dims: the first {preview.MAX_DIMS}" in readme


def test_ci_runs_the_readme_test_command(readme):
    with open(os.path.join(ROOT, ".ci", "run")) as f:
        ci = f.read()
    command = re.search(r"Install and run the tests.*?```\n(.*?)\n```", readme, re.S).group(1)
    install, test = command.split(" && ")
    assert install in ci.replace(" -q -e", " -e") and test in ci
