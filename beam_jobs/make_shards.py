"""Cut long videos into fixed-length windows, written as globally shuffled shards.

    python -m beam_jobs.make_shards --input 'data/latents-*.tfrecord' --output_dir out/ \\
        --window 100 --stride 50 [Beam pipeline options, e.g. --direct_num_workers 2]
    python -m beam_jobs.make_shards --input videos.jsonl --output_dir out/ --window 32 \\
        --stride 16 --frame_size 270x480

Flags not listed under --help are passed to Beam as pipeline options. Without --runner
the job runs locally on Beam's FnApiRunner.
"""
from __future__ import annotations

import atexit
import contextlib
import dataclasses
import logging
import math
import os
import signal
import sys
import threading
import time
from typing import Any, Optional

_STARTED = time.monotonic()  # the command's start: the summary's elapsed time counts from it

try:
    import apache_beam as beam
except ModuleNotFoundError as e:  # `pip install .` is the reader alone
    if e.name != "apache_beam":
        raise
    _MISSING = ("the job needs Apache Beam, which is not installed: install with "
                "pip install -e '.[beam]'")
    if __name__ == "__main__":
        sys.exit(f"python -m beam_jobs.make_shards: error: {_MISSING}")
    raise ModuleNotFoundError(_MISSING, name="apache_beam") from None
from apache_beam.metrics.metric import MetricsFilter
from apache_beam.options.pipeline_options import (DirectOptions, GoogleCloudOptions,
                                                  PipelineOptions, TestOptions)
from apache_beam.runners.portability.fn_api_runner import FnApiRunner

from beam_jobs import (append, forked_workers, local_workers, output_dir, paths, staging,
                       storage)
from beam_jobs.os_errors import os_error, unless_an_os_error
from beam_jobs.cut import CutWindows, ProgressConfig, WindowConfig
from beam_jobs.duplicates import FindDuplicates
from beam_jobs.finalize import (COMMITTED, LONGEST_VIDEO, NOTHING_NEW, NOTHING_TO_COMMIT,
                                DatasetConfig, Finalize)
from beam_jobs.flags import PROG, JobConfig, parse_args, recorded_flags, refuse, runner_name
from beam_jobs.shard_writer import ShardConfig, WriteShuffledShards
from beam_jobs.sources import Source, SourceError, build_source
from readers import format as data_format

_LOG = logging.getLogger("beam_jobs.make_shards")  # not __name__: "__main__" under -m
# Set by Ctrl-C (main's SIGINT handler): Beam re-raises a KeyboardInterrupt that reaches
# a DoFn as a RuntimeError, so an interrupt is known by this, not by the exception.
_INTERRUPTED = threading.Event()
# Runners that run in this process or on this machine: their GroupByKey is held in memory.
LOCAL_RUNNERS = ("fnapirunner", "directrunner", "bundlebaseddirectrunner",
                 "switchingdirectrunner", "prismrunner")


def is_local_runner(runner: str) -> bool:
    """Whether the runner (its class name, flags.runner_name) runs on this machine."""
    return runner.rsplit(".", 1)[-1].lower() in LOCAL_RUNNERS


def shuffle_mode(requested: str, runner: str) -> str:
    """--shuffle auto: spill on local runners (their GroupByKey is held in memory), group
    on any other (a distributed shuffle; per-bundle spills would be millions of files).
    `runner` is the runner's class name (flags.runner_name). Exit 2 with one line for
    spill on a distributed runner: each worker would spill to its own disk, which the
    shard tasks on other workers cannot read."""
    local = is_local_runner(runner)
    if requested == "spill" and not local:
        refuse(f"--shuffle spill: {runner} is a distributed runner, and spill mode writes "
               "sorted runs to each worker's local disk, which other workers cannot read; "
               "use --shuffle group (or auto)")
    if requested != "auto":
        return requested
    return "spill" if local else "group"


def _output_bytes(config: JobConfig, source: Source) -> float:
    """The windows' bytes, estimated from the input's: overlapping windows store a frame
    window / stride times."""
    return source.stored_bytes * max(1.0, config.window / config.stride)


# FnApiRunner's GroupByKey, measured (FACTS.md): 0.75 GB plus about 5x the bytes grouped.
GROUP_IN_MEMORY_BASE, GROUP_IN_MEMORY_FACTOR = 0.75 * 2**30, 5


def note_group_memory(config: JobConfig, source: Source, runner: str) -> None:
    """--shuffle group on a local runner: one line with the memory its in-memory
    GroupByKey will need."""
    if config.shuffle == "group" and is_local_runner(runner):
        output = _output_bytes(config, source)
        _LOG.warning("--shuffle group on %s holds every window in this machine's memory: "
                     "about %.1f GB for an estimated %.2f GB of windows (0.75 GB + 5x); "
                     "--shuffle spill (auto's choice here) holds --spill_buffer_mb per "
                     "worker", runner, (GROUP_IN_MEMORY_BASE
                                        + GROUP_IN_MEMORY_FACTOR * output) / 2**30,
                     output / 2**30)


def build_pipeline(pipeline: beam.Pipeline, config: JobConfig, source: Source,
                   run: output_dir.RunDir, workers: int = 1,
                   base: Optional[data_format.DatasetSpec] = None) -> None:
    """Read the videos, cut them into windows, write the windows as shuffled shards
    (leaving out those of duplicate ids and of videos that failed half-way), then write
    the sidecar files and commit dataset.json. `base`: the committed dataset an
    --append adds to (the videos it has are skipped)."""
    windows = _window_config(config)
    known = base and append.read_known(pipeline, config.output_dir, base)
    videos, read_failures, skipped = pipeline | "ReadVideos" >> source.read(
        known and known.ids)
    cut = videos | "CutWindows" >> CutWindows(
        source.features, windows, source.pad_frame, source.encoder,
        ProgressConfig(source.total_videos, workers, config.progress_interval),
        config.allow_nonfinite)
    duplicates = (cut.videos, cut.abandoned) | "FindDuplicates" >> FindDuplicates(windows)
    written = cut.examples | "WriteShards" >> WriteShuffledShards(
        run, _shard_config(config, source), beam.pvalue.AsSingleton(duplicates.dropped))
    written | "Finalize" >> Finalize(
        run, _dataset_config(config, source, windows), duplicates.unique,
        (read_failures, cut.failures, duplicates.failures), cut.bad_frames, skipped, known)


def _window_config(config: JobConfig) -> WindowConfig:
    return WindowConfig(config.window, config.stride, config.tail, dict(config.splits),
                        config.seed)


def _shard_config(config: JobConfig, source: Source) -> ShardConfig:
    """How the windows become shards. The shuffle's buckets are sized so that one sorted
    bucket is about --shuffle_bucket_mb, with no cap: their count grows with the data
    (overlapping windows store a frame more than once), a bucket's size does not."""
    output_bytes = _output_bytes(config, source)
    return ShardConfig(
        tuple(config.splits), config.compression, config.num_shards,
        max(1, int(config.shard_size_mb * 2**20)),
        max(1, math.ceil(1.1 * output_bytes / (config.shuffle_bucket_mb * 2**20))),
        max(1, int(config.spill_buffer_mb * 2**20)), config.shuffle,
        max(1, int(config.shuffle_bucket_mb * 2**20)))


def _dataset_config(config: JobConfig, source: Source, windows: WindowConfig
                    ) -> DatasetConfig:
    """What dataset.json says besides the counts."""
    return DatasetConfig(
        tuple(source.features), windows, config.compression,
        config.max_failure_fraction, recorded_flags(config),
        source.encoder.to_json() if source.encoder else None, config.input_kind,
        source.frame, source.labels)


def _counter(result, name: str) -> int:
    counters = result.metrics().query(MetricsFilter().with_name(name))["counters"]
    return sum(c.committed or 0 for c in counters)


def run(argv: Optional[list[str]] = None, started: Optional[float] = None,
        encoder: Any = None, fork_workers: bool = False
        ) -> beam.runners.runner.PipelineResult:
    """Run the job; SystemExit with a one-line message for bad flags or too many failures.
    `started` (time.monotonic()) is when the command started, for the summary's elapsed
    time (default: now). `encoder`: any Beam RunInference ModelHandler, used as the frame
    encoder instead of an --encoder file (its load_model once per worker, its
    run_inference on each batch of --encoder_batch_size frames). `fork_workers`: the
    worker processes of --all_cores are forks of this process (forked_workers), which
    must not have run a pipeline yet; main() asks for it, other callers get Beam's own.

    Until the commit (one move of dataset.json, a step of the pipeline) the directory's
    dataset is the one before, whatever stops this run. On a distributed runner the
    pipeline also cleans up and releases the lease, so with --detach this returns once
    the job is submitted; Ctrl-C in a launcher that waits cancels the job."""
    started = time.monotonic() if started is None else started
    config, pipeline_args = parse_args(argv)
    if encoder is not None and (config.encoder or config.input_kind == "latents"):
        refuse("encoder=: a ModelHandler encodes frames: give it without --encoder, with "
               "a manifest or video files as --input")
    runner = runner_name(pipeline_args)
    if config.detach and is_local_runner(runner):
        refuse(f"--detach: a local run ({runner}) is this process; --detach submits a job "
               "to a distributed runner (e.g. --runner DataflowRunner) and exits")
    options = PipelineOptions(pipeline_args)
    config = dataclasses.replace(config, encoder_handler=encoder, shuffle=shuffle_mode(
        config.shuffle, runner))
    # A dry run (Dataflow's --dry_run=True) only builds the job: it must not touch the
    # output directory, which may be gs:// on a machine without credentials or network.
    dry_run = options.view_as(TestOptions).dry_run
    try:
        source = build_source(config)
    except SourceError as e:
        refuse(str(e))
    job = _Job(config, pipeline_args, runner, source,
               config.all_cores and local_workers.worth_workers(source, pipeline_args), started)
    if dry_run:
        return _run(job, output_dir.RunDir(config.output_dir, "dry-run", ""), dry_run)
    # Forked before the lease's thread starts: a fork copies only the calling thread.
    fork = (fork_workers and job.all_cores and source.running_mode == "multi_processing"
            and local_workers.can_fork(pipeline_args, runner))
    with forked_workers.environment() if fork else contextlib.nullcontext() as workers:
        return _claim_and_run(job, options, workers)


@dataclasses.dataclass(frozen=True)
class _Job:
    """What run() settled before the output directory is touched."""
    config: JobConfig
    pipeline_args: list[str]
    runner: str              # flags.runner_name
    source: Source
    all_cores: bool          # --all_cores, and worth its workers (local_workers)
    started: float


def _claim_and_run(job: _Job, options: PipelineOptions,
                   workers: Any) -> beam.runners.runner.PipelineResult:
    """Claim the output directory, run, and leave it committed or as it was. `workers`:
    forked_workers.environment()'s, or None."""
    config, pipeline_args, runner = job.config, job.pipeline_args, job.runner
    job_name = None
    if not is_local_runner(runner):  # the lease names the job; give it a name to name
        job_name = options.view_as(GoogleCloudOptions).job_name
        if not job_name:
            job_name = time.strftime("make-shards-%Y%m%d-%H%M%S") + f"-{os.getpid()}"
            job = dataclasses.replace(job, pipeline_args=[*pipeline_args,
                                                          f"--job_name={job_name}"])
    # Spilling to a remote output would write an object per spill: spill to local disk.
    local_temp = (output_dir.local_temp_base(options.view_as(GoogleCloudOptions).temp_location)
                  if config.shuffle == "spill" and paths.has_scheme(config.output_dir)
                  else None)
    try:
        claim = output_dir.prepare(config.output_dir, config.overwrite,
                                   [p for p, _ in config.input_files], config.input, local_temp,
                                   job_name, config.append)
    except output_dir.OutputDirError as e:
        refuse(str(e))
    except OSError as e:
        if (error := os_error(e, config.output_dir)) is None:
            raise
        sys.exit(f"{PROG}: error: {error}; nothing was committed")
    try:
        result = _run(job, claim.run, False, claim.base, workers)
    except BaseException as e:
        # A run that stops leaves only what proves itself. A cancelled job's workers may
        # still write: its run folder stays, listing their files for the next run.
        if job_name is None:
            output_dir.abandon(claim.run)
        output_dir.release(claim)
        interrupted = isinstance(e, KeyboardInterrupt) or _INTERRUPTED.is_set()
        error = None if interrupted or isinstance(e, SystemExit) else os_error(
            e, config.output_dir)
        if not interrupted and error is None:
            raise
        outcome = (f"{config.output_dir} holds the dataset this run committed"
                   if claim.run.committed() else
                   f"nothing was committed; {config.output_dir} holds what it held before")
        if interrupted:
            raise KeyboardInterrupt(outcome) from None
        sys.exit(f"{PROG}: error: {error}; {outcome}")
    if not config.detach:  # else the job releases the lease itself when it is done
        output_dir.release(claim)
    return result


def _run(job: _Job, run_dir: output_dir.RunDir, dry_run: bool,
         base: Optional[data_format.DatasetSpec] = None,
         workers: Any = None) -> beam.runners.runner.PipelineResult:
    """Build and run the pipeline. `workers`: forked_workers.environment()'s, the
    environment of --all_cores's worker processes, or None."""
    config, pipeline_args, runner, source = job.config, job.pipeline_args, job.runner, job.source
    if base is not None:
        why = append.problem(base, config.output_dir, recorded_flags(config),
                             config.input_kind, source.features,
                             source.encoder.to_json() if source.encoder else None,
                             source.labels)
        if why:
            refuse(why)
    note_group_memory(config, source, runner)
    fork = workers is not None
    options = local_workers.pipeline_options(pipeline_args, job.all_cores,
                                             "in_memory" if fork else source.running_mode)
    staging.stage_requirements(options, config.encoder)
    pipeline = beam.Pipeline(runner=FnApiRunner(default_environment=workers) if fork else None,
                             options=options)
    build_pipeline(pipeline, config, source, run_dir,
                   options.view_as(DirectOptions).direct_num_workers, base)
    result = pipeline.run()
    if config.detach and not dry_run:
        _LOG.info("submitted job %s: it commits %s, cleans up and releases the directory "
                  "on its own", options.view_as(GoogleCloudOptions).job_name,
                  run_dir.output(data_format.DATASET_JSON))
        return result
    try:
        result.wait_until_finish()
    except KeyboardInterrupt:
        if not is_local_runner(runner):
            result.cancel()
            _LOG.warning("cancelled job %s", options.view_as(GoogleCloudOptions).job_name)
        raise
    if dry_run:
        _LOG.info("dry run: the job graph builds; nothing was run or written")
        return result
    skipped = _counter(result, append.SKIPPED_EXISTING)
    if _counter(result, NOTHING_NEW):
        _LOG.info("nothing new: the %d input videos are all in %s already; it is unchanged",
                  skipped, config.output_dir)
        return result
    if not _counter(result, COMMITTED):
        sys.exit(f"{PROG}: error: {_why_not_committed(result, config, run_dir)}. No "
                 "dataset.json was written; a dataset already there is unchanged.")
    _log_summary(config.output_dir, time.monotonic() - job.started)
    if config.append:
        _LOG.info("skipped %d input videos already in the dataset (--append)", skipped)
    return result


def _why_not_committed(result, config: JobConfig, run_dir: output_dir.RunDir) -> str:
    """Why a run that finished did not commit (finalize.finalize): too many failures,
    or no window to commit."""
    failed, ok = _counter(result, "videos_failed"), _counter(result, "videos_ok")
    failures = run_dir.in_run_folder(data_format.FAILURES_JSONL)
    if not _counter(result, NOTHING_TO_COMMIT):
        return (f"{failed} of {failed + ok} videos failed ({failed / max(1, failed + ok):.1%}"
                f"), more than --max_failure_fraction {config.max_failure_fraction}; see "
                f"{failures}")
    if not ok:
        return (f"no window to commit: no video was read ({failed} failed; see {failures})")
    (longest,) = result.metrics().query(MetricsFilter().with_name(LONGEST_VIDEO))[
        "distributions"]
    return (f"no window to commit: every video is shorter than --window {config.window} "
            f"(the longest has {longest.committed.max} frames)")


def _log_summary(directory: str, elapsed: float) -> None:
    from beam_jobs.progress import summary_table

    path = paths.join(directory, data_format.DATASET_JSON)
    dataset = data_format.DatasetSpec.from_json(storage.read_bytes(path).decode("utf-8"),
                                             source=path)
    sizes = {name: entry.size for name, entry in storage.list_dir(directory).items()}
    _LOG.info("wrote %s\n%s", path, summary_table(dataset, sizes, elapsed))


def main() -> None:
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    logging.getLogger("beam_jobs").setLevel(logging.INFO)
    # Worker processes' warnings come back through the local job service, among them a
    # protobuf dump per worker about a directory Beam looks for; their errors still show.
    logging.getLogger(_JOB_SERVICE).setLevel(logging.ERROR)
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")  # worker processes inherit it
    signal.signal(signal.SIGINT, _interrupt)
    for name in ("apache_beam.runners.common", _JOB_SERVICE):
        logging.getLogger(name).addFilter(unless_an_os_error)
    try:
        run(sys.argv[1:], started=_STARTED, fork_workers=True)
    except KeyboardInterrupt as e:  # one line, no traceback; 130 as a shell reports it
        print(f"{PROG}: interrupted: {e or 'nothing was committed'}", file=sys.stderr,
              flush=True)
        # Not sys.exit: the interrupted bundle's state-sampler thread (Beam's, not a
        # daemon) never stops, and the interpreter would wait for it at exit forever.
        logging.shutdown()
        os._exit(130)
    _exit_without_teardown()


def _exit_without_teardown() -> None:
    """Exit 0 without the interpreter's teardown, which frees the ~2,500 modules Beam
    imports one by one: about 1 s of every run (docs/benchmarks.md). Every file the job
    wrote is closed by now, and the atexit handlers (logging's flush, temp directories'
    finalizers) still run: `_run_exitfuncs` is what CPython itself calls at exit."""
    atexit._run_exitfuncs()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


_JOB_SERVICE = "apache_beam.runners.portability.local_job_service"


def _interrupt(signum, frame) -> None:
    """Ctrl-C: stop the run. Beam logs the interrupt as an error with its traceback
    where a DoFn was running; the one line that matters is main's."""
    _INTERRUPTED.set()
    for name in ("apache_beam", _JOB_SERVICE):
        logging.getLogger(name).setLevel(logging.CRITICAL)
    raise KeyboardInterrupt


if __name__ == "__main__":
    main()
