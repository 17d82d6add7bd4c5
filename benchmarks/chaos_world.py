"""The inputs of benchmarks/chaos.py over a dataset's life, and what a clean run of each
operation must commit: small latent videos in sub-folders, written, damaged, repaired,
renamed and moved by `World.prepare`, with the videos and failures `World.expect` holds
for the checks (not a benchmark)."""
from __future__ import annotations

import os
import subprocess
import sys
from typing import NamedTuple, Optional

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))

from beam_jobs.sample import FEATURES, serialize_tensor  # noqa: E402
from readers.format import encode_example, tfrecord  # noqa: E402

OPERATIONS = ("overwrite", "append", "widen", "rename", "corrupt", "retry")
DAMAGES = ("nan", "shape", "garbled")
WINDOW, STRIDE, DIM = 4, 2, 8
# A damaged video fails, and one of two is over the default 5%: the run must still
# commit (the values check finds any good video a too-eager failure drops).
FLAGS = ["--window", str(WINDOW), "--stride", str(STRIDE), "--splits", "train=0.5,val=0.5",
         "--max_failure_fraction", "1"]


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
