"""What the tests share: job runs whose datasets must verify, their processes and exit
lines, and readers of what the job wrote; the input files they write are input_files.py.
Fixtures live in conftest.py. TensorFlow, Beam and job_process.py are imported by the
helpers that use them, not here: tests/readers_only/ imports this module without them."""
from __future__ import annotations

import collections
import contextlib
import filecmp
import importlib
import json
import os
import pathlib
import pickle
import re
import signal
import subprocess
import sys
import time
from typing import TYPE_CHECKING, Optional, Sequence

import numpy as np
from docs_blocks import docs_code  # noqa: F401 (a docs block, for the tests that run one)
from input_files import random_videos, write_videos

if TYPE_CHECKING:
    from job_process import JobProcess


def job_line(capsys, *argv: str, status: int = 2) -> str:
    """Run the command in this process (make_shards.main) and check that it ends with exit
    `status` (2: refused, 1: failed) and a last line on stderr, no traceback; that line."""
    from beam_jobs import make_shards

    code = make_shards.main([str(a) for a in argv])
    err = capsys.readouterr().err
    assert code == status, err[-3000:]
    assert "Traceback" not in err, err[-3000:]
    return err.strip().splitlines()[-1]


# What the lines in docs/guarantees.md's table of paused and fenced runs stand for.
_EXIT_PLACEHOLDERS = re.compile(r"\b(OUT|RUNNER|RUN|PID|HOST|STARTED|JOB|STATE)\b")


def assert_documented_exit(status: int, line: str) -> None:
    """Check that docs/guarantees.md's table of how a paused or fenced run ends has a
    row of exit `status` that gives `line`, the command's last line on stderr (its OUT,
    RUN, JOB... standing for any text)."""
    with open(os.path.join(os.path.dirname(__file__), "..", "docs", "guarantees.md")) as f:
        text = f.read()
    table = text[text.index("### How a paused or fenced run ends"):]
    table = table[:table.index("\n#")]
    said = line.removeprefix("python -m beam_jobs.make_shards: ")
    documented = [_EXIT_PLACEHOLDERS.sub(".+", re.escape(quoted))
                  for row in table.splitlines() if row.startswith("| ") and
                  [cell.strip() for cell in row.split("|")][2] == str(status)
                  for quoted in re.findall(r"`([^`]+)`", row.split("|")[3])]
    assert any(re.fullmatch(pattern, said) for pattern in documented), (status, said)


def inspect_run(capsys, *argv: str) -> tuple[int, str, str]:
    """readers.inspect's command in this process: (exit status, stdout, stderr)."""
    from readers.inspect import command as inspect

    try:
        inspect.main([str(a) for a in argv])
        code = 0
    except SystemExit as e:
        code = e.code if isinstance(e.code, int) else 1
    out, err = capsys.readouterr()
    return code, out, err


def command(*args: str, cwd=None, env=None, timeout: float = 600
            ) -> subprocess.CompletedProcess:
    """`python -m ARGS` in a new process: for what a process boundary is the point of
    (imports, exit statuses, signals, the command's own output)."""
    return subprocess.run([sys.executable, "-m", *map(str, args)], capture_output=True,
                          text=True, cwd=cwd, env=env, stdin=subprocess.DEVNULL,
                          timeout=timeout)


def session_processes(session: int) -> list[str]:
    """The processes of `session` (the pid of a process started with start_new_session)
    still running, one 'pid state command' line each; a zombie, dead and waiting to be
    reaped, is not one."""
    listed = subprocess.run(["ps", "-o", "pid=,stat=,args=", "-s", str(session)],
                            capture_output=True, text=True).stdout.splitlines()
    return [line.strip() for line in listed if not line.split()[1].startswith("Z")]


def assert_session_ends(session: int) -> None:
    """That every process of `session` ends once its leader is dead (a worker, a
    forkserver, a resource tracker): waited for within a bound that only guards against
    a hang; those still running then are killed (the test's own), and named."""
    deadline = time.monotonic() + 60
    while (left := session_processes(session)) and time.monotonic() < deadline:
        time.sleep(0.05)
    for line in left:
        with contextlib.suppress(ProcessLookupError):
            os.kill(int(line.split()[0]), signal.SIGKILL)
    assert not left, "\n".join(left)


def failures_by_video(out) -> dict:
    """The rows of a dataset's failures file by video id (or `row N` without one)."""
    with open(sidecar(out, "failures")) as f:
        return {(r["video_id"] or f"row {r['record_index']}"): r for r in map(json.loads, f)}


def overriding(flags: Sequence[str], *extra: str) -> list[str]:
    """`flags` (pairs of a flag and its value) then `extra`, less the pairs of `flags`
    that `extra` gives again: the job refuses a flag given twice."""
    given = {str(a).split("=", 1)[0] for a in extra if str(a).startswith("--")}
    pairs = [flags[i:i + 2] for i in range(0, len(flags), 2)]
    return [*(v for pair in pairs if pair[0] not in given for v in pair), *extra]


def run_job(input_glob: str, output_dir: str, *extra: str) -> None:
    """Run the job; a dataset it commits must pass `readers.inspect --verify`."""
    from beam_jobs import make_shards

    try:
        make_shards.run(["--input", input_glob, "--output_dir", str(output_dir), *extra])
    finally:
        if "--dry_run=True" not in extra:
            assert_verified(output_dir)


def run_jobs(root, jobs) -> dict[str, str]:
    """Build one small dataset per (name, input under root, extra flags); name -> its path."""
    made = {}
    for name, inp, extra in jobs:
        run_job(str(root / inp), root / name, "--window", "4", "--stride", "2", *extra)
        made[name] = str(root / name)
    return made


_RUN_ID_IN_NAME = re.compile(r"-[0-9a-f]{12}(?=\.tfrecord|\.jsonl)")


def sidecar(output_dir, kind: str) -> pathlib.Path:
    """The side file of `kind` (videos, failures, bad_frames) of the dataset in
    `output_dir`, as its dataset.json names it; of the one run that did not commit
    there (over the failure threshold) when there is no dataset.json."""
    meta = os.path.join(str(output_dir), "dataset.json")
    if os.path.exists(meta):
        with open(meta) as f:
            name = json.load(f)[f"{kind}_file"]
        assert name, f"the dataset in {output_dir} has no {kind} file"
        return pathlib.Path(output_dir) / name
    return pathlib.Path(failed_run_file(output_dir, kind))


def videos_by_id(output_dir) -> dict:
    """The dataset's videos file: video id -> its row."""
    with open(sidecar(output_dir, "videos")) as f:
        return {row["video_id"]: row for row in map(json.loads, f)}


def window_keys(batch) -> list:
    """(video id, start) of each window of `batch`."""
    return [(v.decode(), int(s)) for v, s in zip(batch["video_id"], batch["start"], strict=True)]


def every_window(path, split: str = "train") -> dict:
    """Every window of the split, in order, as one batch (readers.numpy)."""
    from readers.numpy import WindowSource

    return WindowSource(str(path), split).read_batch(slice(None))


def plain_name(name: str) -> str:
    """A shard's, index's or side file's name without its run id:
    `train-00000-of-00002.tfrecord`, `videos.jsonl`."""
    return _RUN_ID_IN_NAME.sub("", name)


def plain_dataset_json(output_dir) -> dict:
    """dataset.json with every shard and index name in it without its run id."""
    return json.loads(plain_name(json.dumps(read_dataset_json(output_dir))))


def plain_names(names) -> list[str]:
    return sorted(plain_name(str(name).rsplit("/", 1)[-1]) for name in names)


def _plain_info(text: str, run_ids: Sequence[str]) -> dict:
    """dataset_info.json without the run ids its templates, description and citation
    carry, and without its homepage (by default where the dataset was written)."""
    for run_id in run_ids:
        text = text.replace(run_id, "RUNID")
    info = json.loads(text)
    info.pop("location", None)
    return info


def same_dataset_files(a, b) -> None:
    """Same shards and failures byte for byte (under the same names but for the run id);
    same dataset_info.json but for the run ids and the homepage in it; same dataset.json
    but for the flags and the run id (its own and its generations')."""
    files = [{plain_name(n): os.path.join(d, n) for n in os.listdir(d)} for d in (a, b)]
    assert sorted(files[0]) == sorted(files[1]) and len(files[0]) > 4
    run_ids = [[g["run_id"] for g in read_dataset_json(d)["generations"]] for d in (a, b)]
    for name, path in files[0].items():
        if name == "dataset_info.json":
            texts = [open(f[name]).read() for f in files]
            assert texts[0] != texts[1] and (
                _plain_info(texts[0], run_ids[0]) == _plain_info(texts[1], run_ids[1]))
        elif name != "dataset.json":
            assert filecmp.cmp(path, files[1][name], shallow=False), name
    meta_a, meta_b = plain_dataset_json(a), plain_dataset_json(b)
    for meta in (meta_a, meta_b):
        meta.pop("flags"), meta.pop("run_id")
        for generation in meta["generations"]:
            generation.pop("run_id")
    assert meta_a == meta_b


def failed_run_file(output_dir, kind: str = "failures") -> str:
    """A sidecar of the one run in `output_dir` that did not commit (over the failure
    threshold): it lies in that run's folder, named by its run id."""
    runs = os.path.join(str(output_dir), "_make_shards", "runs")
    (run,) = os.listdir(runs)
    return os.path.join(runs, run, f"{kind}-{run}.jsonl")


def assert_verified(output_dir) -> None:
    """When `output_dir` holds a dataset, every record of it checks out."""
    if str(output_dir).startswith("gs://") or not os.path.exists(
            os.path.join(output_dir, "dataset.json")):
        return
    import readers
    from readers.inspect.verify import verify

    problems = verify(str(output_dir), readers.load_spec(str(output_dir)))
    assert not problems, problems[:5]


def dataset_bytes(out) -> dict:
    """Every file of the dataset in `out` (not the job's state folder) and its bytes."""
    files = {}
    for name in sorted(os.listdir(out)):
        path = os.path.join(out, name)
        if os.path.isdir(path):
            files[name] = None if name == "_make_shards" else "a directory"
        else:
            with open(path, "rb") as f:
                files[name] = f.read()
    return {name: data for name, data in files.items() if data is not None}


def start_job(argv, out) -> JobProcess:
    """Start the command with `argv` (job_process.py); return once it is writing its own
    shards (never the old ones)."""
    from job_process import JobProcess  # its import sets the fork server's preloads

    process = JobProcess(argv)
    deadline = time.monotonic() + 120
    while process.poll() is None and time.monotonic() < deadline:
        runs = out / "_make_shards" / "runs"
        if os.path.isdir(runs) and any(os.path.exists(runs / r / "shards.json")
                                       for r in os.listdir(runs)):
            break
        time.sleep(0.02)
    assert process.poll() is None, "the run ended before it could be stopped"
    return process


def staged_files(pipeline) -> dict[str, str]:
    """The files a (dry-run) job graph stages for its workers: staged name -> local path."""
    from apache_beam.portability.api import beam_runner_api_pb2

    return {beam_runner_api_pb2.ArtifactStagingToRolePayload.FromString(d.role_payload)
            .staged_name: beam_runner_api_pb2.ArtifactFilePayload.FromString(d.type_payload).path
            for env in pipeline.components.environments.values() for d in env.dependencies}


def read_dataset_json(output_dir) -> dict:
    with open(os.path.join(output_dir, "dataset.json")) as f:
        return json.load(f)


def index_offsets(path) -> list[int]:
    """The frame offsets a shard's text index lists, then where its last frame ends,
    parsed as DALI and the `tfrecord` package parse it (np.loadtxt), not by readers.format."""
    lines = np.loadtxt(path, dtype=np.int64, ndmin=2)
    return lines[:, 0].tolist() + [int(lines[-1].sum())] if len(lines) else [0]


def write_index(path, offsets: Sequence[int]) -> None:
    """A text index of frames at `offsets`, the last one the shard's end."""
    with open(path, "w") as f:
        f.write("".join(f"{a} {b - a}\n" for a, b in zip(offsets, offsets[1:], strict=False)))


EXAMPLES = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                        "examples")


def example_module(name: str):
    """examples/NAME.py imported in this process, with examples/ on the path as a script
    run there has it (the examples import example_data, their datasets' maker)."""
    if EXAMPLES not in sys.path:
        sys.path.insert(0, EXAMPLES)
    return importlib.import_module(name)


def run_apart(code: str, *args: str, tmp_path) -> object:
    """Run `code` in a fresh interpreter, with sys.argv[1:] `args` and `RESULT`, a path
    it pickles what it returns to; for readers that cannot share a process with
    TensorFlow. The run's stderr is in the assertion when it fails."""
    result = os.path.join(str(tmp_path), "result.pickle")
    done = subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True,
                          timeout=600, env={**os.environ, "RESULT": result})
    assert done.returncode == 0, done.stderr[-3000:]
    with open(result, "rb") as f:
        return pickle.load(f)


def windows_read(plans, steps: Optional[int] = None) -> collections.Counter:
    """The windows (a plan's numbers) that epoch plans (EpochBatches, MixtureBatches), one
    a rank, read from their `start_step` on: all their batches, or their first `steps`."""
    return collections.Counter(
        window for plan in plans
        for step in range(plan.start_step, plan.steps if steps is None else
                          plan.start_step + steps)
        for window in plan.batch(step))


def assert_read_once(plans, unread: collections.Counter, fewer_than: int) -> collections.Counter:
    """Epoch plans of the new ranks of an elastic resume (one a rank) take the same steps
    from step 0 and read only windows of `unread` (a window twice only where `unread`
    holds it twice: a mixture's draws), leaving out fewer than `fewer_than`; what they
    read."""
    assert {(plan.start_step, plan.steps) for plan in plans} == {(0, plans[0].steps)}
    read = windows_read(plans)
    assert not read - unread, read - unread
    assert sum((unread - read).values()) < fewer_than, (unread - read, fewer_than)
    return read


def windows_by_key(batch_dicts) -> dict:
    """(video_id, start) -> the window's values, from batches of either reader (numpy
    arrays or tf.Tensors)."""
    out = {}
    for batch in batch_dicts:
        for i, (vid, start) in enumerate(zip(batch["video_id"], batch["start"], strict=True)):
            vid = vid.numpy() if hasattr(vid, "numpy") else vid
            out[(bytes(vid), int(start))] = {
                k: (v[i].numpy() if hasattr(v, "numpy") else v[i]) for k, v in batch.items()}
    return out


def assert_same_windows(ours: dict, theirs: dict) -> None:
    """Two `windows_by_key` results hold the same windows with the same values."""
    assert ours.keys() == theirs.keys()
    for key, values in ours.items():
        for name, value in values.items():
            np.testing.assert_array_equal(value, theirs[key][name], err_msg=f"{key} {name}")


def assert_clips_of(whole: dict, clipped: dict, clip, window: int) -> None:
    """Each row of the batch `clipped` (a readers.clips.Clip's of windows of `window`
    frames) is its window of the batch `whole` cut at its clip_offset: the per-frame
    features cut alike, the others as they are."""
    from readers.format import PER_FRAME

    offsets = clipped["clip_offset"]
    assert offsets.dtype == np.int64 and len(offsets) == len(whole["start"])
    assert ((0 <= offsets) & (offsets <= window - clip.span)).all()
    for name, values in whole.items():
        if name in PER_FRAME:
            expected = np.stack([v[clip.frames(o)] for v, o in zip(values, offsets, strict=True)])
            assert clipped[name].shape == (len(values), clip.length, *values.shape[2:])
            np.testing.assert_array_equal(clipped[name], expected, err_msg=name)
        else:
            np.testing.assert_array_equal(clipped[name], values, err_msg=name)


def read_examples(output_dir, split: str = "train") -> list[dict]:
    """Every example of a split, in shard order, parsed to numpy."""
    import tensorflow as tf

    meta = read_dataset_json(output_dir)
    spec = {f["name"]: f for f in meta["features"]}
    compression = "GZIP" if meta["compression"] == "gzip" else ""
    out = []
    for shard in meta["splits"][split]["shards"]:
        path = os.path.join(output_dir, shard["file"])
        for record in tf.data.TFRecordDataset(path, compression_type=compression):
            ex = tf.train.Example.FromString(record.numpy()).features.feature
            row = {}
            for name, f in spec.items():
                if f["encoding"] == "float":
                    row[name] = np.array(ex[name].float_list.value, np.float32).reshape(f["shape"])
                elif f["encoding"] == "int64":
                    row[name] = np.array(ex[name].int64_list.value).reshape(f["shape"])
                elif f["encoding"] == "raw":
                    row[name] = np.frombuffer(ex[name].bytes_list.value[0],
                                              np.dtype(f["dtype"]).newbyteorder("<")
                                              ).reshape(f["shape"])
                elif f["encoding"] in ("png", "jpeg"):
                    row[name] = np.stack([_decode_image(b, f["shape"][-1])
                                          for b in ex[name].bytes_list.value])
                    row[name + ".bytes"] = list(ex[name].bytes_list.value)
                else:
                    row[name] = ex[name].bytes_list.value[0].decode()
            out.append(row)
    return out


def _decode_image(data: bytes, channels: int) -> np.ndarray:
    import io

    from PIL import Image

    array = np.asarray(Image.open(io.BytesIO(data)))
    return array.reshape(*array.shape[:2], channels)


def first_day(root, flags) -> pathlib.Path:
    """`root`/R/day1 (16 latent videos in two files) built into `root`/out with `flags`,
    as a dataset's first day."""
    write_videos(str(root / "R" / "day1"), random_videos(np.random.default_rng(3), 16), files=2)
    run_job(str(root / "R" / "day1" / "*.tfrecord"), root / "out", *flags)
    return root
