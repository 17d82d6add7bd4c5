"""Run the job from this tree or from an older commit of it, with its process tree
measured (benchmarks/process_tree.py): shared by the memory benchmarks that compare
against the code before a change (not a benchmark)."""
from __future__ import annotations

import os
import subprocess
import sys

from process_tree import REPO, run_tree

HEAD = "HEAD+"   # this tree as it is, uncommitted changes included


def code_of(rev: str, directory: str) -> str:
    """The directory to run `rev`'s job from: this tree for HEAD, else `git archive` of
    the commit extracted under `directory`."""
    if rev == HEAD:
        return REPO
    target = os.path.join(directory, f"code-{rev}")
    if not os.path.isdir(target):
        os.makedirs(target)
        archive = subprocess.run(["git", "-C", REPO, "archive", rev], check=True,
                                 capture_output=True).stdout
        subprocess.run(["tar", "-x", "-C", target], input=archive, check=True)
    return target


def run_job(code_dir: str, argv: list[str], log_path: str) -> dict:
    """`python -m beam_jobs.make_shards ARGV --overwrite` run from `code_dir` (so that its
    beam_jobs is the one imported); run_tree's figures."""
    os.environ["PYTHONPATH"] = code_dir   # what any worker process imports, too
    return run_tree([sys.executable, "-m", "beam_jobs.make_shards", *argv, "--overwrite"],
                    log_path, cwd=code_dir)
