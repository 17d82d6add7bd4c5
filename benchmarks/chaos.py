"""Random kills across a dataset's life: does every kill leave the directory whole, and
does the next run commit with no hand work?

    python benchmarks/chaos.py --iterations 200 [--seed 0] [--json chaos.json] [--work_dir DIR]

A small latent dataset is built, then each iteration runs the job once (`--overwrite` or
`--append`; an append gets a new input file of two videos first) and interrupts it at a
random moment in [0, 1.3 x a clean run's time] with one of:

  kill     SIGKILL: nothing of the run's own code runs after it
  int      SIGINT (Ctrl-C)
  term     SIGTERM
  stop     SIGSTOP, then the lease made to look expired (as 120 s without a renewal
           would), a second run of the same command that takes the lease over and
           commits, then SIGCONT: the first run goes on with a lost lease

After each, four checks; a failed one is a violation, counted and described:

  old or new   dataset.json is the one before or a new one; every file it lists is
               there, and every file it lists that was there before is byte for byte
               what it was (shards are never rewritten)
  verify       readers.verify (inspect --verify) finds no problem
  next run     the same command, run to its end, exits 0 (its own checks as above)
  left behind  then the directory holds dataset.json, the files it lists and nothing
               else (but the marker folders of runs that lost their lease), and no
               Beam temp folder is left in the temp directory the runs were given

tests/test_chaos.py runs a few iterations in CI; docs/guarantees.md has a long run's
counts.
"""
from __future__ import annotations

import argparse
import collections
import hashlib
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from typing import Optional

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))

from beam_jobs.sample import write_latent_sample  # noqa: E402
from readers import load_spec  # noqa: E402
from readers.verify import verify  # noqa: E402
from readers.format import RUN_ID  # noqa: E402

KILLS = ("kill", "int", "term", "stop")
FLAGS = ["--window", "4", "--stride", "2", "--splits", "train=0.5,val=0.5"]
SIGNALS = {"kill": signal.SIGKILL, "int": signal.SIGINT, "term": signal.SIGTERM}


def start_command(argv: list[str], env: dict) -> subprocess.Popen:
    """`python -m beam_jobs.make_shards ARGV`, in a new interpreter."""
    return subprocess.Popen([sys.executable, "-m", "beam_jobs.make_shards", *argv], env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)


class World:
    """The inputs, the output directory and the temp directory the runs share; `start`
    starts the command: start_command, or another function that takes (argv, env) and
    returns what a Popen of it would give (poll, wait, send_signal, pid, stderr)."""

    def __init__(self, root: str, seed: int, start=start_command):
        self.root, self.rng, self._start = root, np.random.default_rng(seed), start
        self.inputs = os.path.join(root, "in")
        self.out = os.path.join(root, "out")
        self.temp = os.path.join(root, "tmp")
        os.makedirs(self.inputs)
        os.makedirs(self.temp)
        self.files = 0
        for _ in range(3):
            self.add_input(4)

    def add_input(self, videos: int) -> None:
        """A new input file of `videos` latent videos (12 to 40 frames of 8 floats)."""
        made = os.path.join(self.root, "new")
        (path,) = write_latent_sample(made, videos, files=1, dim=8, frames=(12, 40),
                                      seed=int(self.rng.integers(2**31)))
        os.rename(path, os.path.join(self.inputs, f"part-{self.files:04d}.tfrecord"))
        self.files += 1

    def start(self, mode: str):
        argv = ["--input", os.path.join(self.inputs, "*.tfrecord"), "--output_dir", self.out,
                *FLAGS, f"--{mode}"]
        return self._start(argv, {**os.environ, "TMPDIR": self.temp})


def _digest(path: str) -> str:
    with open(path, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()


def snapshot(out: str) -> dict[str, str]:
    """dataset.json and every file it lists, by digest ({} without a dataset)."""
    path = os.path.join(out, "dataset.json")
    if not os.path.exists(path):
        return {}
    with open(path, "rb") as f:
        files = json.loads(f.read())["files"]
    return {name: _digest(os.path.join(out, name)) for name in ["dataset.json", *files]
            if os.path.exists(os.path.join(out, name))}


def check_whole(out: str, before: dict[str, str]) -> list[str]:
    """'old or new' and 'verify'."""
    problems = []
    now = snapshot(out)
    if before and not now:
        return ["old or new: dataset.json is gone"]
    with open(os.path.join(out, "dataset.json")) as f:
        listed = json.load(f)["files"]
    missing = [name for name in listed if name not in now]
    if missing:
        problems.append(f"old or new: listed but missing: {missing[:3]}")
    changed = [name for name in now if name in before and now[name] != before[name]
               and name not in ("dataset.json", "dataset_info.json")]
    if changed:
        problems.append(f"old or new: rewritten: {changed[:3]}")
    try:
        problems += [f"verify: {p}" for p in verify(out, load_spec(out))]
    except Exception as e:   # a reader that cannot even open it
        problems.append(f"verify: {type(e).__name__}: {e}")
    return problems


def check_left_behind(world: World) -> list[str]:
    problems = []
    listed = set(json.load(open(os.path.join(world.out, "dataset.json")))["files"])
    for name in sorted(set(os.listdir(world.out)) - listed - {"dataset.json"}):
        if name != "_make_shards":
            problems.append(f"left behind: {name}")
            continue
        state = os.path.join(world.out, name)
        for entry in sorted(os.listdir(state)):
            runs = os.path.join(state, entry)
            if entry != "runs":
                problems.append(f"left behind: _make_shards/{entry}")
                continue
            for run in os.listdir(runs):   # only the markers of runs that lost the lease
                if not RUN_ID.match(run) or os.listdir(os.path.join(runs, run)) != [
                        "lost_lease.json"]:
                    problems.append(f"left behind: _make_shards/runs/{run}: "
                                    f"{sorted(os.listdir(os.path.join(runs, run)))}")
    beam = [n for n in os.listdir(world.temp) if n.startswith("beam-pipeline-temp")]
    if beam:
        problems.append(f"left behind: {len(beam)} Beam temp folders")
    return problems


def _expire_lease(out: str) -> bool:
    path = os.path.join(out, "_make_shards", "lease.json")
    try:
        with open(path) as f:
            held = json.load(f)
    except (OSError, ValueError):
        return False
    held["expires"] = time.time() - 1
    with open(path, "w") as f:
        json.dump(held, f)
    return True


def iteration(world: World, mode: str, kill: str, delay: float) -> tuple[list[str], str]:
    """One killed run and its checks: (violations, what the killed run ended with)."""
    before = snapshot(world.out)
    job = world.start(mode)
    time.sleep(delay)
    if job.poll() is not None:
        ended = f"done before the kill ({job.returncode})"
    elif kill == "stop":
        os.kill(job.pid, signal.SIGSTOP)
        try:
            expired = _expire_lease(world.out)
            taker = world.start(mode)
            taken = taker.wait(timeout=600)
            if taken != 0:
                ended = "(the run that took over failed)"
                return [f"next run: the run taking over exited {taken}: "
                        f"{taker.stderr.read().strip()[-300:]}"], ended
        finally:
            os.kill(job.pid, signal.SIGCONT)
        status = job.wait(timeout=600)
        ended = f"stopped{' past its lease' if expired else ''}, then exit {status}"
        job.stderr.read()
    else:
        job.send_signal(SIGNALS[kill])
        status = job.wait(timeout=600)
        err = job.stderr.read()
        ended = f"exit {status}"
        if kill != "kill" and status not in (0, 130):
            return [f"{kill}: exit {status}: {err.strip()[-300:]}"], ended
        if kill != "kill" and status == 130 and "Traceback" in err:
            return [f"{kill}: a traceback: {err.strip()[-300:]}"], ended
    problems = check_whole(world.out, before) if before or os.path.exists(
        os.path.join(world.out, "dataset.json")) else []
    rerun = world.start(mode)
    status = rerun.wait(timeout=600)
    if status != 0:
        problems.append(f"next run: exit {status}: {rerun.stderr.read().strip()[-300:]}")
        return problems, ended
    problems += check_whole(world.out, snapshot(world.out))
    problems += check_left_behind(world)
    return problems, ended


def clean_run_seconds(world: World, mode: str) -> float:
    started = time.monotonic()
    job = world.start(mode)
    if job.wait(timeout=600) != 0:
        raise SystemExit(f"a clean run failed: {job.stderr.read()[-2000:]}")
    return time.monotonic() - started


def run(iterations: int, seed: int = 0, work_dir: Optional[str] = None,
        log=print, in_turn: bool = False, start=start_command) -> dict:
    """`iterations` killed runs in a fresh world; the counts and the violations.
    `in_turn`: each kill and mode in turn (a short run covers them all), not at random.
    `start`: how a run is started (World)."""
    rng = random.Random(seed)
    root = tempfile.mkdtemp(prefix="chaos-", dir=work_dir)
    try:
        world = World(root, seed, start)
        span = clean_run_seconds(world, "overwrite") * 1.3
        counts, violations = collections.Counter(), []
        for i in range(iterations):
            mode = ("append", "overwrite")[i % 2] if in_turn else rng.choice(
                ("overwrite", "append"))
            if mode == "append":
                world.add_input(2)
            kill = KILLS[i % len(KILLS)] if in_turn else rng.choice(KILLS)
            delay = rng.uniform(0, span)
            problems, ended = iteration(world, mode, kill, delay)
            counts[f"{mode} {kill}"] += 1
            counts["violations"] += bool(problems)
            if problems:
                violations.append({"iteration": i, "mode": mode, "kill": kill,
                                   "delay": round(delay, 2), "ended": ended,
                                   "problems": problems})
            log(f"{i + 1}/{iterations} {mode} {kill} at {delay:.2f} s: {ended}; "
                f"{'VIOLATION ' + '; '.join(problems) if problems else 'ok'}")
        return {"iterations": iterations, "seed": seed, "kill_span_s": round(span, 2),
                "counts": dict(sorted(counts.items())), "violations": violations}
    finally:
        shutil.rmtree(root, ignore_errors=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--iterations", type=int, default=200)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--json", help="write the result here")
    parser.add_argument("--work_dir", help="where the world is made (default: the temp dir)")
    args = parser.parse_args()
    result = run(args.iterations, args.seed, args.work_dir)
    print(json.dumps({k: v for k, v in result.items() if k != "violations"}, indent=2))
    for violation in result["violations"]:
        print(json.dumps(violation))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(result, f, indent=2)
    sys.exit(1 if result["violations"] else 0)


if __name__ == "__main__":
    main()
