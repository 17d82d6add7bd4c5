"""How a run ends, told by the launcher: it waits for the job (a Ctrl-C cancels a
distributed one), reads the outcome from the job's counters, and logs the summary of a
commit or raises `Failed` with the one line that says why there was none."""
from __future__ import annotations

import contextlib
import logging
import re
import shlex
import signal
import time
from typing import Iterator, Optional

from apache_beam.metrics.metric import MetricsFilter
from apache_beam.runners.runner import PipelineResult

from beam_jobs import outdir
from beam_jobs.commit import decide
from beam_jobs.commit.finalize import (
    FAILED_VIDEOS,
    GOOD_VIDEOS,
    IDS_TWICE,
    LONGEST_VIDEO,
    OUTCOME_COUNTERS,
    SKIPPED_EXISTING,
    WINDOWS,
)
from beam_jobs.core import paths, storage
from beam_jobs.core.progress import duration
from beam_jobs.cut.duplicates import ALIASES_LOGGED, DUPLICATE_VIDEOS
from beam_jobs.job import job_states, lifecycle
from beam_jobs.job.errors import Failed, one_line, os_error_line
from beam_jobs.job.launch import Launch
from beam_jobs.outdir import Claim
from beam_jobs.outdir.holder import Ask, CannotAsk, Job
from beam_jobs.outdir.lease import LeaseLost
from readers import format as data_format

_LOG = logging.getLogger("beam_jobs.make_shards")
ASK_EVERY_SECONDS = 5.0


def finish(result: PipelineResult, launch: Launch, claim: Claim) -> PipelineResult:
    """Wait for the job (unless detached) and tell how it ended. A distributed job's
    launcher gives its lease back only once the runner confirms it stopped (`_stopped`);
    a dry run has no lease."""
    config, run, held = launch.config, claim.run, claim.lease
    if held is not None:   # a distributed job's id, for later runs to ask its runner
        held.record_job_id(job_states.job_id(result))
    if config.io.detach and not launch.dry_run:   # a distributed run (runners.py)
        job = held.job if held is not None else None
        _LOG.info("submitted %s: it commits %s, cleans up and releases the directory on "
                  "its own", job.describe() if job is not None else "the job",
                  run.output(data_format.DATASET_JSON))
        return result
    _wait_for_the_job(result, launch, claim)
    if launch.dry_run:
        _LOG.info("dry run: the job graph builds; nothing was run or written")
        return result
    _tell_the_outcome(result, launch, claim)
    return result


def _wait_for_the_job(result: PipelineResult, launch: Launch, claim: Claim) -> None:
    """Wait for the job to end. When the wait for a distributed job ends early, it is
    stopped (`_stopped`), and the error raised is lifecycle's line (an interrupt, the
    lost lease, a full disk...) or `Failed` saying why the wait ended and, where the
    runner did not confirm the job stopped, what that means."""
    held = claim.lease
    try:
        _wait(result, held.job if held is not None else None, launch.ask())
    except BaseException as e:
        if held is None or held.job is None:
            raise
        interrupted = isinstance(e, KeyboardInterrupt)
        unconfirmed = _stopped(result, launch, claim, held.job, interrupted)
        if interrupted or one_line(e, LeaseLost) or os_error_line(e, launch.config.io.output_dir):
            raise   # lifecycle's line: an interrupt, the lost lease, a full disk...
        if unconfirmed:
            raise Failed(f"the wait for {held.job.describe()} ended ({_reason(e)}): "
                         f"{unconfirmed}") from None
        raise Failed(f"{held.job.describe()} failed ({_reason(e)}; the traceback is in "
                     f"the runner's log): {lifecycle.directory_state()}") from None


def _tell_the_outcome(result: PipelineResult, launch: Launch, claim: Claim) -> None:
    """Of a job that ran to its end, what its counters say: nothing new (logged), no
    commit (`Failed` with the decision's reason), or the summary of the commit."""
    config, run = launch.config, claim.run
    decision = decide.decide(decide.Counts(
        _counter(result, GOOD_VIDEOS), _counter(result, FAILED_VIDEOS),
        _counter(result, WINDOWS), _longest(result), _counter(result, IDS_TWICE)),
        config.shards.max_failure_fraction, config.windows.window, claim.base is not None)
    skipped = _counter(result, SKIPPED_EXISTING)
    if decision.outcome == decide.NOTHING_NEW:
        _LOG.info("nothing new: the %d input videos are all in %s already; it is unchanged",
                  skipped, config.io.output_dir)
        return
    if not _counter(result, OUTCOME_COUNTERS[decide.COMMIT]):
        see = (f"; see {run.in_run_folder(data_format.sidecar_name('failures', run.run_id))}"
               if decision.outcome == decide.TOO_MANY_FAILURES or
               _counter(result, FAILED_VIDEOS) else "")
        raise Failed(f"{decision.reason}{see}. No dataset.json was written; a dataset "
                     "already there is unchanged.")
    duplicates = _counter(result, DUPLICATE_VIDEOS)
    _log_summary(config.io.output_dir, time.monotonic() - launch.started, duplicates)
    if config.io.append:
        _LOG.info("skipped %d input videos already in the dataset by id (--append)",
                  skipped - duplicates)


def _wait(result: PipelineResult, job: Optional[Job], ask: Ask) -> None:
    """Wait for the job to end. Beam's wait for a portable job gives up when its state
    stream breaks or outlives --job_server_timeout (300 s) while the job runs on: then
    its runner is asked every few seconds until it says the job ended (DONE returns;
    any other end raises what the wait raised)."""
    try:
        result.wait_until_finish()
    except Exception as error:
        if job is None:
            raise
        while True:
            try:
                state = ask(job)
            except CannotAsk:
                raise error from None
            if state.terminal:
                if state.name == "DONE":
                    return
                raise
            time.sleep(ASK_EVERY_SECONDS)


def _reason(error: BaseException) -> str:
    """What the runner said of a failed job, in a line: its last line (a traceback's
    is the exception's), without Beam's prefix, cut to 300 characters."""
    lines = [line.strip() for line in str(error).splitlines() if line.strip()]
    text = re.sub(r"^Pipeline \S+ failed in state \w+: ", "", lines[-1] if lines else "")
    return text[:300] or type(error).__name__


def _stopped(result: PipelineResult, launch: Launch, claim: Claim, job: Job,
             interrupted: bool) -> Optional[str]:
    """After the wait for a distributed job ended early: on Ctrl-C, ask the runner to
    cancel the job and wait (bounded) for it to stop. The lease is given back
    (`held.job_stopped`) only when the runner confirms the job stopped; else an
    interrupt fences off the job's commit (a Ctrl-C means "commit nothing", also where
    the runner lets the job run on) and says so in one line, and a failure returns
    that line."""
    held = claim.lease
    assert held is not None   # a job's run holds its lease (finish)
    ask, out = launch.ask(), launch.config.io.output_dir
    if interrupted:
        _LOG.warning("asking %s to cancel %s; waiting up to %.0f s for it to stop "
                     "(Ctrl-C again stops waiting)", launch.runner, job.describe(),
                     job_states.CANCEL_WAIT_SECONDS)
        state = job_states.cancel(result, job, ask)
    else:
        try:
            state = ask(job)
        except CannotAsk:
            state = None
    if state is not None and state.stopped:
        held.job_stopped = True
        return None
    said = (f"{launch.runner} reports it {state.name}, which does not confirm that its "
            "workers stopped" if state is not None else f"{launch.runner} could not be asked")
    unconfirmed = f"could not confirm that {job.describe()} stopped ({said})"
    lease = (f"so its lease stays with it; a later run there asks {launch.runner} about it "
             "first")
    if not interrupted:
        return f"{unconfirmed}: it may still write and commit to {out}, {lease}"
    with _shielded():   # a second Ctrl-C must not leave the fence half-built
        committed = outdir.fence_commit(claim.run)
    if committed:
        raise KeyboardInterrupt(f"{unconfirmed}, and it committed before the cancel "
                                f"reached it: {out} holds the dataset this run committed")
    raise KeyboardInterrupt(f"{unconfirmed}: it commits nothing now (its commit step finds "
                            f"the cancel), and {out} holds what it held before; its workers "
                            f"may still write there, {lease}")


@contextlib.contextmanager
def _shielded() -> Iterator[None]:
    """Ctrl-C and SIGTERM held back for the block (this thread's), then delivered."""
    signal.pthread_sigmask(signal.SIG_BLOCK, lifecycle.SIGNALS)
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_UNBLOCK, lifecycle.SIGNALS)


def _counter(result: PipelineResult, name: str) -> int:
    counters = result.metrics().query(MetricsFilter().with_name(name))["counters"]
    return sum(c.committed or 0 for c in counters)


def _longest(result: PipelineResult) -> int:
    found = result.metrics().query(MetricsFilter().with_name(LONGEST_VIDEO))["distributions"]
    return max((d.committed.max for d in found if d.committed), default=0)


def _log_summary(directory: str, elapsed: float, duplicates: int = 0) -> None:
    path = paths.join(directory, data_format.DATASET_JSON)
    dataset = data_format.DatasetSpec.from_json(storage.read_bytes(path).decode("utf-8"),
                                                source=path)
    sizes = {name: entry.size for name, entry in storage.list_dir(directory).items()}
    _LOG.info("wrote %s\n%s\none page of it all (docs/report.md): python -m readers.inspect %s "
              "--report report.html", path, summary_table(dataset, sizes, elapsed, duplicates),
              shlex.quote(directory))
    single = [s.file for split in dataset.splits.values() for s in split.shards
              if s.examples == 1]
    if single:
        _LOG.warning("%d shard(s) hold a single window (%s): the `tfrecord` package cannot "
                     "read one through its index (read it with index_path=None, "
                     "docs/readers.md); readers.numpy, tf.data, TFDS and DALI can. Fewer "
                     "--num_shards avoids them", len(single), single[0])


def summary_table(dataset: data_format.DatasetSpec, shard_bytes: dict[str, int],
                  elapsed: float, duplicates: int = 0) -> str:
    """The end-of-run table: per split videos, windows, shards and bytes; the input videos
    skipped as duplicates of another's content (`duplicates`: they are in no split, and
    the log lines that name them may be far above); failures; throughput."""
    rows: list[tuple] = [("split", "videos", "skipped", "frames", "bad frames", "windows",
                          "shards", "MB")]
    total_frames = total_windows = 0
    for name, split in dataset.splits.items():
        size = sum(shard_bytes.get(s.file, 0) for s in split.shards)
        rows.append((name, split.videos, split.skipped_short, split.frames, split.bad_frames,
                     split.windows, len(split.shards), f"{size / 2**20:,.1f}"))
        total_frames += split.frames
        total_windows += split.windows
    widths = [max(len(str(row[i])) for row in rows) for i in range(len(rows[0]))]
    lines = ["  ".join(str(v).rjust(w) if i else str(v).ljust(w)
                       for i, (v, w) in enumerate(zip(row, widths, strict=True))) for row in rows]
    if duplicates:
        lines.append(f"skipped as duplicates: {duplicates} input video(s) whose frames, "
                     "labels and metadata another video has, stored once under one id (the "
                     "column 'skipped' counts videos too short for a window); each is named "
                     "with the video it repeats in a line \"skipped 'ID': its frames are "
                     f"those of 'ID'\" of this run's log (the first {ALIASES_LOGGED} per "
                     "worker process; on Dataflow, in the workers' logs)")
    remembered = dataset.failures - dataset.generations[-1].failures
    earlier = f", {remembered} of them remembered from earlier runs" if remembered else ""
    lines.append(f"failed videos: {dataset.failures} (see {dataset.sidecars.get('failures')}"
                 f"{earlier}); "
                 f"elapsed {duration(elapsed)} from the command's start; overall "
                 f"{total_frames / max(elapsed, 1e-9):,.0f} frames/s and "
                 f"{total_windows / max(elapsed, 1e-9):,.0f} windows/s")
    return "\n".join(lines)
