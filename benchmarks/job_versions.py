"""Run the job from this tree or from an older commit of it, with its process tree
measured (benchmarks/process_tree.py): shared by the memory benchmarks that compare
against the code before a change (not a benchmark)."""
from __future__ import annotations

import argparse
import os
import statistics
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


def compare(versions: list[str], jobs: dict[str, list[str]], work_dir: str,
            repeats: int) -> dict[str, dict[str, list[dict]]]:
    """Run each job (label -> argv) with each code version, in turns: --repeats rounds,
    in each every version runs every job; {version: {label: [run_tree's figures]}}."""
    runs = {v: {label: [] for label in jobs} for v in versions}
    for r in range(repeats):
        for version in versions:
            code = code_of(version, work_dir)
            for label, argv in jobs.items():
                log = os.path.join(work_dir, f"job-{version}-{label}-{r}.log")
                result = run_job(code, argv, log)
                result.pop("output")
                print(f"{version:8s} {label:>4s} run {r + 1}: peak {result['peak_mb']:7.0f} MB, "
                      f"wall {result['wall_s']:6.1f} s", flush=True)
                runs[version][label].append(result)
    return runs


def peak_table(runs: dict[str, dict[str, list[dict]]], small: str, large: str,
               target: float) -> dict[str, dict[str, float]]:
    """Print each version's median peak at `small` and `large` and their ratio against
    `target`; return the medians."""
    peaks = {v: {label: statistics.median(r["peak_mb"] for r in rs)
                 for label, rs in by_label.items()} for v, by_label in runs.items()}
    print(f"{'code':10s} {small + ' peak MB':>12s} {large + ' peak MB':>12s} "
          f"{large + '/' + small:>7s}")
    for v, p in peaks.items():
        ratio = p[large] / p[small]
        print(f"{v:10s} {p[small]:12.0f} {p[large]:12.0f} {ratio:7.2f}  (target <= {target}: "
              f"{'met' if ratio <= target else 'MISSED'})")
    return peaks


def parser_with_versions(doc: str) -> argparse.ArgumentParser:
    """A benchmark's command line with the flags these comparisons share: --repeats,
    --baseline (the commit to compare with), --json and --work_dir."""
    parser = argparse.ArgumentParser(description=doc.split("\n\n")[0],
                                     epilog="Other flags are passed to the job.")
    parser.add_argument("--repeats", type=int, default=1)
    parser.add_argument("--baseline", default="f6c515c",
                        help="the commit to compare with ('' for none)")
    parser.add_argument("--json", required=True, help="where the results go")
    parser.add_argument("--work_dir", default=None,
                        help="where the data is written (default: a temp dir, removed after)")
    return parser


def versions_of(args: argparse.Namespace) -> list[str]:
    return [HEAD] + ([args.baseline] if args.baseline else [])
