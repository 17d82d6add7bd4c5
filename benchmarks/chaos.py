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
           its handler, ends it as a kill does, by the signal, with nothing said)
  stop     SIGSTOP, then the lease made to look expired (as 120 s without a renewal
           would), a second run of the same command that takes the lease over and
           commits, then SIGCONT: the first run goes on with a lost lease, and
           ends with exit 0, 1 or 2 and no traceback

After each, five checks; a failed one is a violation, counted and described:

  old or new   dataset.json is the one before or a new one; every file it lists is
               there, and every file it lists that was there before is byte for byte
               what it was (shards are never rewritten)
  verify       readers.verify (inspect --verify) finds no problem
  values       every window read back (readers.numpy) is its input video's frames at its
               start, value for value, with its recipe; each video has the windows its
               frames give, in one split, and no video is there twice (under two ids);
               after the next run, the videos are exactly those the inputs' history
               gives (World.expect): every good input video once, a damaged one absent,
               a repaired one only once retried (or rebuilt, or under a new id); and
               the failures file names exactly the failed ids that history remembers
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
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from typing import NamedTuple, Optional

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))

from beam_jobs.sample import FEATURES, serialize_tensor  # noqa: E402
from readers import load_spec  # noqa: E402
from readers.format import DatasetSpec, encode_example, tfrecord  # noqa: E402
from readers.numpy import WindowSource  # noqa: E402
from readers.verify import verify  # noqa: E402

OPERATIONS = ("overwrite", "append", "widen", "rename", "corrupt", "retry")
KILLS = ("kill", "int", "term", "stop")
DAMAGES = ("nan", "shape", "garbled")
WINDOW, STRIDE, DIM = 4, 2, 8
# A damaged video fails, and one of two is over the default 5%: the run must still
# commit (the values check finds any good video a too-eager failure drops).
FLAGS = ["--window", str(WINDOW), "--stride", str(STRIDE), "--splits", "train=0.5,val=0.5",
         "--max_failure_fraction", "1"]
SIGNALS = {"kill": signal.SIGKILL, "int": signal.SIGINT, "term": signal.SIGTERM}


def start_command(argv: list[str], env: dict) -> subprocess.Popen:
    """`python -m beam_jobs.make_shards ARGV`, in a new interpreter and, as a shell's job
    control starts each command, a process group of its own (a lost lease's marker
    stays while any process of the run's group lives: docs/guarantees.md)."""
    return subprocess.Popen([sys.executable, "-m", "beam_jobs.make_shards", *argv], env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                            start_new_session=True)


class Video(NamedTuple):
    """An input video as written when good (a damaged one is written otherwise)."""
    frames: np.ndarray   # float32 [T, DIM]
    recipe: np.ndarray   # float32 [4]


def _record(video: Video, damage: Optional[str]) -> bytes:
    """The video's record (beam_jobs.sample's format), or a damaged one that the job must
    fail with the video's id: frames with a NaN, frames of DIM - 1 values (the first
    file, which pins the shape, is never damaged, moved or renamed), or a serialized
    tensor cut short."""
    frames = video.frames
    if damage == "nan":
        frames = frames.copy()
        frames[len(frames) // 2, 0] = np.nan
    elif damage == "shape":
        frames = frames[:, :-1]
    tensor = serialize_tensor(frames)
    if damage == "garbled":
        tensor = tensor[:-5]
    return tfrecord.frame(encode_example(FEATURES, {"frames": tensor, "recipe": video.recipe}))


class World:
    """The inputs, the output directory and the temp directory the runs share, and what
    the inputs' history says the dataset holds; `start` starts the command:
    start_command, or another function that takes (argv, env) and returns what a Popen
    of it would give (poll, wait, send_signal, pid, stderr).

    Videos are known by a serial number, as the job cannot know them by name: an id is
    a file's path relative to the inputs' root and a record index, so a rename, a move
    or a wider --input gives a video a new id. `ids` maps every id a video has had to
    it (file names are never used twice, so an id never names two videos)."""

    def __init__(self, root: str, seed: int, start=start_command):
        self.root, self.rng, self._start = root, np.random.default_rng(seed), start
        self.inputs = os.path.join(root, "in")
        self.out = os.path.join(root, "out")
        self.temp = os.path.join(root, "tmp")
        os.makedirs(self.temp)
        self.videos: list[Video] = []             # by serial
        self.damaged: dict[int, str] = {}         # serial -> how it is damaged now
        self.files: dict[str, list[int]] = {}     # path under in/ -> serials, in order
        self.folders = ["d00"]                    # those --input names
        self.star = False                         # --input 'in/*/*.tfrecord' (2+ folders)
        self.names = 0                            # file names handed out
        self.ids: dict[str, int] = {}
        self.expected: set[int] = set()           # the videos a clean run commits
        self.failed: set[str] = set()             # the ids its failures file remembers
        for _ in range(3):
            self.add_file("d00", 4)

    def add_file(self, folder: str, videos: int, damaged: Optional[int] = None) -> None:
        """A new input file of `videos` latent videos (12 to 40 frames of DIM floats),
        the `damaged`-th of them damaged."""
        serials = []
        for i in range(videos):
            frames = self.rng.standard_normal((int(self.rng.integers(12, 40)), DIM),
                                              dtype=np.float32)
            self.videos.append(Video(frames, self.rng.random(4, dtype=np.float32)))
            serials.append(len(self.videos) - 1)
            if i == damaged:
                self.damaged[serials[-1]] = str(self.rng.choice(DAMAGES))
        name = self._new_name(folder)
        self.files[name] = serials
        self._write(name)

    def _new_name(self, folder: str) -> str:
        self.names += 1
        return f"{folder}/part-{self.names - 1:04d}.tfrecord"

    def _write(self, name: str) -> None:
        """Write file `name` whole, then move it in (no run is going on)."""
        path = os.path.join(self.inputs, name)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path + ".new", "wb") as f:
            for serial in self.files[name]:
                f.write(_record(self.videos[serial], self.damaged.get(serial)))
        os.replace(path + ".new", path)

    def prepare(self, op: str) -> None:
        """Change the inputs for `op`, and expect what its clean run commits."""
        folder = str(self.rng.choice(self.folders))
        if op == "append":
            self.add_file(folder, 2)
        elif op == "widen":
            self.folders.append(f"d{len(self.folders):02d}")
            self.star = bool(self.rng.random() < 0.5)
            self.add_file(self.folders[-1], 2)
        elif op == "rename":   # never the first file: its first record pins the shape,
            # nor a folder's last one: a folder's own glob must match a file
            movable = [n for n in sorted(self.files)[1:]
                       if sum(m.split("/")[0] == n.split("/")[0] for m in self.files) > 1]
            old = str(self.rng.choice(movable or sorted(self.files)[1:]))
            new = self._new_name(folder if old in movable else old.split("/")[0])
            os.rename(os.path.join(self.inputs, old), os.path.join(self.inputs, new))
            self.files[new] = self.files.pop(old)
        elif op == "corrupt":
            self.add_file(folder, 2, damaged=int(self.rng.integers(2)))
        elif op == "retry" and self.damaged:
            serial = int(self.rng.choice(sorted(self.damaged)))
            del self.damaged[serial]
            self._write(next(n for n, s in self.files.items() if serial in s))
        self.expect(op)

    def expect(self, op: str) -> None:
        """What a clean run of `op` commits: a rebuild, every good input video, and
        the damaged ones' failures; an append, the dataset's videos and failures and
        the inputs' good videos but those whose id failed before (unless retried: then
        their failure goes), and the damaged ones' failures."""
        inputs = self.input_ids()
        if op == "overwrite":
            self.expected, self.failed = set(), set()
        retry, failed_before = op == "retry", set(self.failed)
        for video_id, serial in inputs.items():
            if serial in self.damaged:
                self.failed.add(video_id)
            elif retry or video_id not in failed_before:
                self.expected.add(serial)
                self.failed.discard(video_id)

    def patterns(self) -> list[str]:
        if len(self.folders) > 1 and self.star:
            return [os.path.join(self.inputs, "*", "*.tfrecord")]
        return [os.path.join(self.inputs, folder, "*.tfrecord") for folder in self.folders]

    def input_ids(self) -> dict[str, int]:
        """The id of each video the inputs hold -> its serial, as the job names it by
        default: its file's path relative to the globs' common folder, ':', its index."""
        root = os.path.join(self.inputs, self.folders[0]) if len(self.folders) == 1 \
            else self.inputs
        found = {}
        for name, serials in self.files.items():
            relative = os.path.relpath(os.path.join(self.inputs, name), root)
            for index, serial in enumerate(serials):
                video_id = f"{relative}:{index}"
                if self.ids.setdefault(video_id, serial) != serial:
                    raise AssertionError(f"the benchmark gave id {video_id!r} to two videos")
                found[video_id] = serial
        return found

    def start(self, op: str):
        argv = ["--input", *self.patterns(), "--output_dir", self.out, *FLAGS,
                "--overwrite" if op == "overwrite" else "--append"]
        if op == "retry":
            argv.append("--retry_failed")
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
        for window, metadata, raw_id, start in zip(batch["window"], batch["metadata"],
                                                   batch["video_id"], batch["start"]):
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


def iteration(world: World, op: str, kill: str, delay: float) -> tuple[list[str], str]:
    """One killed run of `op` (World.prepare done) and its checks: (violations, what
    the killed run ended with)."""
    before = snapshot(world.out)
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
        elif kill != "kill" and status not in (0, 130):
            return [f"{kill}: exit {status}: {err.strip()[-300:]}"], ended
        if kill != "kill" and status == 130 and "Traceback" in err:
            return [f"{kill}: a traceback: {err.strip()[-300:]}"], ended
    problems = check_dataset(world, before, complete=False) if before or os.path.exists(
        os.path.join(world.out, "dataset.json")) else []
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
