"""Random kills across a dataset's life: does every kill leave the directory whole, with
every video's windows its input's frames, and does the next run commit with no hand work?

    python benchmarks/chaos.py --iterations 200 [--seed 0] [--json chaos.json] [--work_dir DIR]

A small latent dataset is built from input files in folders under in/ (at first one,
in/d00, under `--input 'in/d00/*.tfrecord'`); then each iteration changes the inputs for
one operation, runs the job once for it and interrupts the run at a random moment in
[0, 1.3 x a clean run's time]. The operations:

  overwrite  --overwrite over the inputs as they are
  append     --append, after a new input file of two videos in one of the folders
  widen      --append over a widened --input: a new folder with a new file of two
             videos, and --input names it too (one glob per folder, or 'in/*/*.tfrecord');
             the first widening moves the ids' root from in/d00 to in/, so every old
             video comes again under a new id and must be known by its content
  rename     --append, after an input file is renamed or moved to another folder (its
             videos come under new ids)
  corrupt    --append, after a new file of two videos, one of them damaged (NaN frames,
             frames of the wrong shape, or a sequence that is no serialized tensor): it
             is a failure (a failures row), never a video of the dataset
  retry      --append --retry_failed, after one damaged video is repaired (its file
             rewritten in place, so its id stays the failed one)

and the kills:

  kill     SIGKILL: nothing of the run's own code runs after it
  int      SIGINT (Ctrl-C)
  term     SIGTERM
           (each ends the run with exit 130 and one line; one that comes in the first
           milliseconds of the interpreter's start, before the command's code installs
           its handler, ends it as a kill does: SIGTERM by the signal, with nothing
           said; SIGINT with Python's own KeyboardInterrupt, whose traceback names no
           line of the command after its imports)
  stop     SIGSTOP, then the lease made to look expired (as 120 s without a renewal
           would), a second run of the same command that takes the lease over and
           commits, then SIGCONT: the first run goes on with a lost lease, and
           ends with exit 0, 1 or 2 and no traceback

After each, five checks; a failed one is a violation, counted and described:

  old or new   dataset.json is the one before or a new one; every file it lists is
               there, and every file it lists that was there before is byte for byte
               what it was (shards are never rewritten)
  verify       readers.inspect.verify (inspect --verify) finds no problem
  values       every window read back (readers.numpy) is its input video's frames at its
               start, value for value, with its recipe; each video has the windows its
               frames give, in one split, and no video is there twice (under two ids);
               after the next run, the videos are exactly those the inputs' history
               gives (World.expect): every good input video once, a damaged one absent,
               a repaired one only once retried (or rebuilt, or under a new id); and
               the failures file names exactly the failed ids that history remembers;
               each window's entry in its shard's window table (its video's hash and
               its valid frames) is the window read back; each split's statistics in
               dataset.json are those of its frames as the windows read back give
               them, each frame once (count, min and max exactly, mean and std within
               1e-9 of numpy's)
  next run     the same command, run to its end, exits 0 (its own checks as above)
  left behind  then the directory holds dataset.json, the files it lists and nothing
               else (no marker of a run that lost its lease either: that run has
               ended, and the rerun removes its marker), and no Beam temp folder is
               left in the temp directory the runs were given

tests/test_chaos.py runs each operation and kill once in CI; docs/guarantees.md has a
long run's counts.
"""
from __future__ import annotations

import argparse
import collections
import hashlib
import json
import os
import random
import re
import shutil
import signal
import sys
import tempfile
import time
from typing import Optional

import numpy as np

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO)

from chaos_world import OPERATIONS, STRIDE, WINDOW, World, start_command  # noqa: E402

from readers import load_spec  # noqa: E402
from readers.format import DatasetSpec, window_table  # noqa: E402
from readers.inspect.verify import verify  # noqa: E402
from readers.numpy import WindowSource  # noqa: E402

KILLS = ("kill", "int", "term", "stop")
SIGNALS = {"kill": signal.SIGKILL, "int": signal.SIGINT, "term": signal.SIGTERM}


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


def _tree(folder: str) -> list[str]:
    return sorted(os.path.relpath(os.path.join(d, f), folder)
                  for d, _, files in os.walk(folder) for f in files)[:5]


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
    """Nothing but dataset.json and the files it lists, not even the marker of a run
    that lost its lease: every run before has ended, so the rerun removed it."""
    listed = set(json.load(open(os.path.join(world.out, "dataset.json")))["files"])
    problems = [f"left behind: {name}" + (f": {_tree(os.path.join(world.out, name))}"
                                          if name == "_make_shards" else "")
                for name in sorted(set(os.listdir(world.out)) - listed - {"dataset.json"})]
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


def expected_starts(frames: int) -> list[int]:
    """The window starts of a video of `frames` frames under FLAGS and the default
    --tail align_end: the stride grid, and one last window ending at the last frame."""
    return sorted(set(range(0, frames - WINDOW + 1, STRIDE)) | {frames - WINDOW})


def check_values(world: World, complete: bool) -> list[str]:
    """'values': each window read back (readers.numpy) against its input video, each
    video's starts and split, no video twice; `complete` (after a clean run): the videos
    are World.expected and the failures file's ids World.failed. At most three examples
    of each kind of problem."""
    found: dict[str, list[str]] = collections.defaultdict(list)
    starts: dict[str, list[int]] = collections.defaultdict(list)
    splits: dict[str, set[str]] = collections.defaultdict(set)
    spec = load_spec(world.out)
    for split in spec.splits:
        source = WindowSource(world.out, split)
        if not len(source):
            continue
        batch = source.read_batch(slice(0, len(source)))
        found["tables unlike the windows"] += table_problems(world.out, spec, split, batch)
        found["statistics unlike the frames"] += stats_problems(spec, split, batch)
        for window, metadata, raw_id, start in zip(batch["window"], batch["metadata"],
                                                   batch["video_id"], batch["start"], strict=True):
            video_id, start = raw_id.decode(), int(start)
            splits[video_id].add(split)
            starts[video_id].append(start)
            if video_id not in world.ids:
                continue
            video = world.videos[world.ids[video_id]]
            if not np.array_equal(window, video.frames[start:start + WINDOW]):
                found["windows unlike their input frames"].append(f"{video_id}@{start}")
            if not np.array_equal(metadata, video.recipe):
                found["metadata unlike its recipe"].append(f"{video_id}@{start}")
    by_serial: dict[int, list[str]] = collections.defaultdict(list)
    for video_id, got in starts.items():
        if video_id not in world.ids:
            found["no input video has these ids"].append(video_id)
            continue
        serial = world.ids[video_id]
        by_serial[serial].append(video_id)
        if len(splits[video_id]) > 1:
            found["videos in two splits"].append(f"{video_id} {sorted(splits[video_id])}")
        if sorted(got) != expected_starts(len(world.videos[serial].frames)):
            found["starts unlike the frames'"].append(f"{video_id} {sorted(got)}")
    for video_ids in by_serial.values():
        if len(video_ids) > 1:
            found["one video under two ids"].append(" = ".join(sorted(video_ids)))
    if complete:
        names = {serial: video_id for video_id, serial in world.input_ids().items()}
        for serial in sorted(world.expected - by_serial.keys()):
            found["missing"].append(names.get(serial, f"video #{serial}"))
        for serial in sorted(by_serial.keys() - world.expected):
            found["there but not expected"].append(by_serial[serial][0])
        failed = failure_ids(world.out, spec)
        found["failures missing"] += sorted(world.failed - failed)
        found["failures not expected"] += sorted(failed - world.failed)
    return [f"values: {kind}: {', '.join(examples[:3])}"
            f"{f' and {len(examples) - 3} more' if len(examples) > 3 else ''}"
            for kind, examples in found.items() if examples]


def table_problems(out: str, spec: DatasetSpec, split: str, batch: dict) -> list[str]:
    """Each window's entry in its shard's window table against the window read back
    (`batch`: the split whole, in the shards' order): its video's hash and valid frames."""
    videos, valid = [], []
    for shard in spec.splits[split].shards:
        with open(os.path.join(out, shard.table), "rb") as f:
            table = window_table.decode(f.read(), shard, WINDOW)
        videos.append(table.videos)
        valid.append(table.valid)
    wrong = np.flatnonzero(
        (np.concatenate(videos) != window_table.video_hashes(
            v.decode() for v in batch["video_id"]))
        | (np.concatenate(valid) != batch["mask"].sum(1)))
    return [f"{split} window {i}" for i in wrong.tolist()]


def stats_problems(spec: DatasetSpec, split: str, batch: dict) -> list[str]:
    """The split's statistics in dataset.json against those of its frames as the windows
    read back give them: each video's frames put where their windows start, each once,
    those of mask 1 counted."""
    frames: dict[bytes, dict[int, np.ndarray]] = collections.defaultdict(dict)
    for window, mask, video_id, start in zip(batch["window"], batch["mask"],
                                             batch["video_id"], batch["start"], strict=True):
        for t in np.flatnonzero(mask).tolist():
            frames[video_id][int(start) + t] = window[t]
    values = np.array([frame for video in frames.values() for frame in video.values()],
                      np.float64)
    stats = spec.stats[split]["window"]
    problems = [] if (stats.frames, stats.count) == (len(values), len(values)) else [
        f"{split}: {stats.frames} frames counted, its windows hold {len(values)}"]
    if problems or not len(values):
        return problems
    for name, exact, figure in (("min", True, values.min(0)), ("max", True, values.max(0)),
                                ("mean", False, values.mean(0)), ("std", False, values.std(0))):
        recorded = getattr(stats, name)
        if not (np.array_equal(recorded, figure) if exact else
                np.allclose(recorded, figure, rtol=1e-9, atol=1e-12)):
            problems.append(f"{split} {name}: {recorded[:2]} ..., the frames give "
                            f"{figure[:2]} ...")
    return problems


def failure_ids(out: str, spec: DatasetSpec) -> set[str]:
    """The video ids of the dataset's failures file."""
    if "failures" not in spec.sidecars:
        return set()
    with open(os.path.join(out, spec.sidecars["failures"])) as f:
        return {json.loads(line)["video_id"] for line in f if line.strip()}


def check_dataset(world: World, before: dict[str, str], complete: bool) -> list[str]:
    """'old or new', 'verify' and 'values'."""
    problems = check_whole(world.out, before)
    if not os.path.exists(os.path.join(world.out, "dataset.json")):
        return problems
    try:
        return problems + check_values(world, complete)
    except Exception as e:   # a reader that cannot even open it
        return problems + [f"values: {type(e).__name__}: {e}"]


_FRAME = re.compile(r'File "([^"]+)", line (\d+), in ')
# make_shards.py's lines before its early handlers are installed
with open(os.path.join(REPO, "beam_jobs", "make_shards.py")) as _source:
    _BEFORE_HANDLERS = next(n for n, line in enumerate(_source, start=1)
                            if "early_signals.install()" in line)


def interrupted_before_the_command(err: str) -> bool:
    """Whether stderr is Python's traceback of a KeyboardInterrupt raised before the
    command's code installed its handlers: in the interpreter's start, or in the
    imports of make_shards.py above its `early_signals.install()`."""
    if not err.rstrip().endswith("KeyboardInterrupt"):
        return False
    for path, line in _FRAME.findall(err):
        ours = os.path.relpath(path, REPO) if path.startswith(REPO + os.sep) else None
        if ours == os.path.join("beam_jobs", "make_shards.py") and int(line) < _BEFORE_HANDLERS:
            continue
        if ours is not None and ours not in (os.path.join("beam_jobs", "__init__.py"),
                                             os.path.join("beam_jobs", "job", "__init__.py"),
                                             os.path.join("beam_jobs", "job",
                                                          "early_signals.py")):
            return False
    return True


def iteration(world: World, op: str, kill: str, delay: float) -> tuple[list[str], str]:
    """One killed run of `op` (World.prepare done) and its checks: (violations, what
    the killed run ended with)."""
    before = snapshot(world.out)
    early: list[str] = []   # what the killed run's own end violated
    job = world.start(op)
    time.sleep(delay)
    if job.poll() is not None:
        ended = f"done before the kill ({job.returncode})"
    elif kill == "stop":
        os.kill(job.pid, signal.SIGSTOP)
        try:
            expired = _expire_lease(world.out)
            taker = world.start(op)
            taken = taker.wait(timeout=600)
            if taken != 0:
                ended = "(the run that took over failed)"
                return [f"next run: the run taking over exited {taken}: "
                        f"{taker.stderr.read().strip()[-300:]}"], ended
        finally:
            os.kill(job.pid, signal.SIGCONT)
        status = job.wait(timeout=600)
        ended = f"stopped{' past its lease' if expired else ''}, then exit {status}"
        err = job.stderr.read()
        if status not in (0, 1, 2) or "Traceback" in err:   # 1, 2: it lost the lease
            return [f"stop: exit {status}: {err.strip()[-300:]}"], ended
    else:
        job.send_signal(SIGNALS[kill])
        status = job.wait(timeout=600)
        err = job.stderr.read()
        ended = f"exit {status}"
        if kill != "kill" and status == -SIGNALS[kill] and not err:
            # the first milliseconds of the interpreter's start, before the command's
            # code installed a handler: the signal's default action, as a kill
            ended = f"ended by the signal (exit {status}) before the command's code ran"
        elif kill == "int" and interrupted_before_the_command(err):
            # Python's own SIGINT handler, there before the command's: KeyboardInterrupt
            # in the interpreter's imports, and its traceback
            ended = f"exit {status}: KeyboardInterrupt before the command's code ran"
        elif kill != "kill" and status not in (0, 130):
            early = [f"{kill}: exit {status}: {err.strip()[-300:]}"]
        if kill != "kill" and status == 130 and "Traceback" in err:
            early = [f"{kill}: a traceback: {err.strip()[-300:]}"]
    # the checks and the rerun, after a violation too: the world's history stays the
    # inputs' (a rerun left out would leave the next iterations' expectations wrong)
    problems = early + (check_dataset(world, before, complete=False) if before or
                        os.path.exists(os.path.join(world.out, "dataset.json")) else [])
    rerun = world.start(op)
    status = rerun.wait(timeout=600)
    if status != 0:
        problems.append(f"next run: exit {status}: {rerun.stderr.read().strip()[-300:]}")
        return problems, ended
    problems += check_dataset(world, snapshot(world.out), complete=True)
    problems += check_left_behind(world)
    return problems, ended


def clean_run_seconds(world: World) -> float:
    """The time of a clean build, the second of two: the first may include starting
    what `start` starts (JobProcess's fork server imports the job), which would put
    most kills after the end of the runs. Checked as any run."""
    world.expect("overwrite")
    for _ in range(2):
        started = time.monotonic()
        job = world.start("overwrite")
        if job.wait(timeout=600) != 0:
            raise SystemExit(f"a clean run failed: {job.stderr.read()[-2000:]}")
        seconds = time.monotonic() - started
    problems = check_dataset(world, {}, complete=True)
    if problems:
        raise SystemExit(f"the first build does not hold: {problems}")
    return seconds


def run(iterations: int, seed: int = 0, work_dir: Optional[str] = None,
        log=print, in_turn: bool = False, start=start_command) -> dict:
    """`iterations` killed runs in a fresh world; the counts and the violations.
    `in_turn`: each operation and kill in turn (a short run covers them all), not at
    random. `start`: how a run is started (World)."""
    rng = random.Random(seed)
    root = tempfile.mkdtemp(prefix="chaos-", dir=work_dir)
    try:
        world = World(root, seed, start)
        span = clean_run_seconds(world) * 1.3
        counts, violations = collections.Counter(), []
        for i in range(iterations):
            op = OPERATIONS[i % len(OPERATIONS)] if in_turn else rng.choice(OPERATIONS)
            kill = KILLS[i % len(KILLS)] if in_turn else rng.choice(KILLS)
            delay = rng.uniform(0, span)
            world.prepare(op)
            problems, ended = iteration(world, op, kill, delay)
            counts[f"{op} {kill}"] += 1
            counts["violations"] += bool(problems)
            if problems:
                violations.append({"iteration": i, "op": op, "kill": kill,
                                   "delay": round(delay, 2), "ended": ended,
                                   "problems": problems})
            log(f"{i + 1}/{iterations} {op} {kill} at {delay:.2f} s: {ended}; "
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
