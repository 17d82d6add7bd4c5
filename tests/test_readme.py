"""The README and docs/ tell the truth where a program can check it: the job's flags,
their defaults and --help groups (docs/flags.md), the reader's keywords, the constants they
quote, the CI command, how a paused or fenced run ends, and that every page is linked."""
import argparse
import inspect
import os
import re
from fractions import Fraction

import pytest
from helpers import assert_documented_exit

from beam_jobs.job import flags
from beam_jobs.outdir import lease
from beam_jobs.outdir.claim import taken_over_error
from beam_jobs.runtime import local_workers
from readers import format as data_format
from readers.inspect import command as inspect_cli
from readers.inspect import preview
from readers.tfdata import dataset, malloc

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DOCS = os.path.join(ROOT, "docs")


def _read(*parts: str) -> str:
    with open(os.path.join(ROOT, *parts)) as f:
        return f.read()


def _words(text: str) -> str:
    """The same words, whatever the line breaks."""
    return " ".join(text.split())


@pytest.fixture(scope="module")
def readme() -> str:
    return _read("README.md")


@pytest.fixture(scope="module")
def flags_doc() -> str:
    return _read("docs", "flags.md")


def _table_defaults(text: str) -> dict[str, str]:
    """flag -> default cell of the job's flag tables."""
    rows = re.findall(r"^\| `(--\w+)[^`]*` \| ([^|]+) \|", text, re.M)
    return {flag: default.strip() for flag, default in rows}


def _table_groups(text: str) -> dict[str, str]:
    """flag -> the `## heading` its table row sits under."""
    groups, heading = {}, None
    for line in text.splitlines():
        if line.startswith("## "):
            heading = line[3:].strip()
        match = re.match(r"^\| `(--\w+)[^`]*` \|", line)
        if match:
            groups[match.group(1)] = heading
    return groups


def _job_actions() -> dict[str, argparse.Action]:
    parser = flags.build_parser()
    return {a.option_strings[0]: a for a in parser._actions
            if a.option_strings and a.option_strings[0].startswith("--")
            and a.option_strings[0] != "--help"}


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


def test_every_job_flag_is_in_docs_flags_with_its_default_and_back(flags_doc):
    table = _table_defaults(flags_doc)
    actions = _job_actions()
    assert sorted(table) == sorted(actions), set(table) ^ set(actions)
    for flag, action in actions.items():
        readme_default, code_default = _readme_value(table[flag]), _parser_value(action)
        if isinstance(code_default, float):
            assert readme_default == pytest.approx(code_default), flag
        else:
            assert readme_default == code_default, flag


def test_every_flag_is_in_the_group_help_puts_it_in(flags_doc):
    groups = _table_groups(flags_doc)
    for group in flags.build_parser()._action_groups:
        for action in group._group_actions:
            flag = action.option_strings[0] if action.option_strings else None
            if flag and flag.startswith("--") and flag != "--help":
                assert groups.get(flag) == group.title, (flag, group.title, groups.get(flag))


def test_the_readme_points_to_flags_for_the_flags(readme):
    assert not _table_defaults(readme), "the flag table lives in docs/flags.md"
    assert "(docs/flags.md)" in readme


def test_every_make_dataset_keyword_is_in_the_readme(readme):
    signature = readme[readme.index("`make_dataset(path"):]
    signature = signature[:signature.index("`:")]
    for name, parameter in inspect.signature(dataset.make_dataset).parameters.items():
        default = "" if parameter.default is inspect.Parameter.empty else parameter.default
        assert re.search(rf"\b{name}\b", signature), name
        if default != "":
            assert f"{name}={default!r}".replace("'", '"') in signature.replace(" ", ""), name


def test_the_constants_the_readme_quotes(readme):
    readme = _words(readme)
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
    assert f"at most {inspect_cli.MAX_PREVIEW}, larger N" in readme
    assert f"more than {preview.MAX_DIMS} dims: the first {preview.MAX_DIMS}" in readme


def test_the_constants_the_docs_quote():
    dataflow = _words(_read("docs", "dataflow.md"))
    assert f"latent inputs under {local_workers.ALL_CORES_MIN_BYTES >> 20} MiB run in one " \
           "process" in dataflow
    guarantees = _words(_read("docs", "guarantees.md"))
    assert f"renewed every {lease.HEARTBEAT_SECONDS:g} s" in guarantees
    assert f"not renewed for {lease.LEASE_SECONDS:g} s" in guarantees
    fmt = _words(_read("docs", "format.md"))
    assert f"Format version {data_format.FORMAT_VERSION};" in fmt
    *before, last = data_format.READABLE_VERSIONS
    assert f"read versions {', '.join(map(str, before))} and {last}" in fmt
    assert f"at most {data_format.MAX_SHARDS:,} per split" in fmt
    assert f"`<shard>{data_format.INDEX_SUFFIX}`" in fmt
    for name in (data_format.FAILURES_JSONL, data_format.BAD_FRAMES_JSONL,
                 data_format.VIDEOS_JSONL, data_format.DATASET_JSON):
        assert name in fmt, name
    for encoding in data_format.ENCODINGS:
        assert f"- `{encoding}`" in fmt or "`png`, `jpeg`" in fmt, encoding
    assert "INTEGER_ACCURATE" in fmt
    rows = data_format.video_rows
    assert (f"`metadata` at most {rows.MAX_METADATA:,} values (`video_rows.MAX_METADATA`"
            in fmt)
    assert f"`fields` at most {rows.MAX_FIELDS:,} bytes of JSON" in fmt
    assert "1 MiB a reader reads a line up to" in fmt
    assert data_format.videos_file.MAX_LINE == 1 << 20
    flags_doc = _words(_read("docs", "flags.md"))
    assert f"at most {data_format.MAX_SHARDS:,}" in flags_doc


def test_guarantees_lists_the_lines_a_paused_run_ends_with():
    # The refusal of a run paused while it started was said nowhere. The tests that make
    # each row happen check their lines so too (tests/test_kills.py, test_portable.py).
    error = "python -m beam_jobs.make_shards: error: "
    assert_documented_exit(2, error + str(taken_over_error("/data/out")))
    assert_documented_exit(1, error + str(lease.LeaseLost("/data/out")))
    with pytest.raises(AssertionError):
        assert_documented_exit(2, error + str(lease.LeaseLost("/data/out")))


@pytest.mark.slow
def test_the_index_format_the_docs_describe(tmp_path, rng):
    """docs/format.md: `<shard>.index` holds one `offset length` line per record, where its
    frame starts and how long it is, each frame ending where the next starts; dataset.json
    lists it."""
    import struct

    from helpers import read_dataset_json, run_job
    from input_files import random_videos, write_videos

    write_videos(str(tmp_path / "in"), random_videos(rng, 4), files=1)
    run_job(str(tmp_path / "in" / "*"), str(tmp_path / "out"), "--window", "5")
    (shard,) = read_dataset_json(tmp_path / "out")["splits"]["train"]["shards"]
    assert shard["index"] == shard["file"] + data_format.INDEX_SUFFIX
    data = (tmp_path / "out" / shard["file"]).read_bytes()
    lines = (tmp_path / "out" / shard["index"]).read_text().splitlines()
    assert len(lines) == shard["examples"]
    end = 0
    for line in lines:     # each a whole TFRecord frame, right after the one before
        start, size = map(int, line.split(" "))
        (length,) = struct.unpack("<Q", data[start:start + 8])
        assert start == end and size == length + 16 and line == f"{start} {size}"
        end = start + size
    assert end == len(data)
    fmt = _words(_read("docs", "format.md"))
    assert ("text, one line per record, `offset length` in decimal and a newline, the byte "
            "where its TFRecord frame starts and the frame's length") in fmt


def test_ci_runs_the_readme_test_command(readme):
    with open(os.path.join(ROOT, ".ci", "run")) as f:
        ci = f.read()
    command = re.search(r"Install and run the tests.*?```\n(.*?)\n```", readme, re.S).group(1)
    install, *steps = command.split(" && ")
    assert install in ci.replace(" -q -e", " -e")
    at = [ci.find(f"\n{step}") for step in steps]       # each a line of its own, in order
    assert -1 not in at and at == sorted(at), (steps, at)


def _doc_pages() -> list[str]:
    return sorted(f"docs/{name}" for name in os.listdir(DOCS) if name.endswith(".md"))


def test_every_docs_link_is_a_page_and_every_page_is_linked(readme):
    linked = set(re.findall(r"\]\((docs/[^)#]+\.md)(?:#[^)]*)?\)", readme))
    assert linked, "the README links into docs/"
    for link in linked:
        assert os.path.isfile(os.path.join(ROOT, link)), link
    assert sorted(linked) == _doc_pages(), set(linked) ^ set(_doc_pages())


def _anchor(heading: str) -> str:
    """GitHub's anchor of a heading: lower case, punctuation dropped, spaces to dashes."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def test_every_relative_link_in_the_docs_resolves():
    pages = {"README.md": _read("README.md")}
    pages.update({page: _read(*page.split("/")) for page in _doc_pages()})
    anchors = {page: {_anchor(h) for h in re.findall(r"^#+ (.+)$", text, re.M)}
               for page, text in pages.items()}
    for page, text in pages.items():
        here = os.path.dirname(page)
        for target, anchor in re.findall(r"\]\(([^):#\s]*\.md)(?:#([^)]*))?\)", text):
            path = os.path.normpath(os.path.join(here, target))
            assert path in pages, (page, target)
            if anchor:
                assert anchor in anchors[path], (page, target, anchor)


def test_the_readme_stays_short(readme):
    assert len(readme.splitlines()) <= 300


def test_contributing_lists_every_module_and_nothing_else():
    """Each group of docs/contributing.md names its folder (`readers/format/`); its
    entries are paths below it. Every module is listed once, and no listed one is gone."""
    with open(os.path.join(ROOT, "docs", "contributing.md")) as f:
        section = f.read().split("## Where things live", 1)[1]
    listed, folder = [], None
    for line in section.splitlines():
        if line.startswith(("- ", "  ")) and folder:
            listed += [folder + name for name in re.findall(r"`([\w/]+\.py)`", line)]
        elif re.search(r"`((?:beam_jobs|readers)[\w/]*/)`", line):
            folder = re.search(r"`((?:beam_jobs|readers)[\w/]*/)`", line).group(1)
    modules = sorted(os.path.relpath(os.path.join(folder, name), ROOT)
                     for package in ("beam_jobs", "readers")
                     for folder, _, files in os.walk(os.path.join(ROOT, package))
                     for name in files if name.endswith(".py"))
    assert sorted(listed) == modules, set(listed) ^ set(modules)


def test_the_light_install_row_names_setup_pys_requirements():
    """docs/readers.md's first install row lists exactly what `pip install` brings."""
    from beam_jobs.dependencies import READER

    with open(os.path.join(ROOT, "docs", "readers.md")) as f:
        row = next(line for line in f if line.startswith("| `video-window-shards` |"))
    named = [n.strip().lower() for n in row.split("|")[2].split(",")]
    assert named == [re.split(r"[<>=]", r)[0].lower() for r in READER]
    assert f"| {len(READER)} packages and the project" in row


def test_docs_append_names_the_flags_an_append_may_change():
    from beam_jobs.commit.append import FREE_FLAGS

    text = _read("docs", "append.md")
    listed = text[text.index("flags but `--input`"):text.index("`FREE_FLAGS`")]
    assert set(re.findall(r"`--(\w+)`", " ".join(listed.split()))) == FREE_FLAGS
