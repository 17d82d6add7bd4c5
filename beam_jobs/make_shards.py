"""Cut long videos into fixed-length windows, written as globally shuffled shards.

    python -m beam_jobs.make_shards --input 'data/latents-*.tfrecord' --output_dir out/ \\
        --window 100 --stride 50 [Beam pipeline options, e.g. --direct_num_workers 2]
    python -m beam_jobs.make_shards --input videos.jsonl --output_dir out/ --window 32 \\
        --stride 16 --frame_size 270x480

Flags not listed under --help are passed to Beam as pipeline options. Without --runner
the job runs locally on Beam's FnApiRunner.
"""
from __future__ import annotations

import sys
import time
from typing import Any, Optional

_STARTED = time.monotonic()  # the command's start: the summary's elapsed time counts from it
if __name__ == "__main__":
    from beam_jobs.job import early_signals
    early_signals.install()   # until main() installs the run's own (job/lifecycle.py)

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
from apache_beam.options.pipeline_options import DirectOptions
from apache_beam.runners.portability.fn_api_runner import FnApiRunner

from beam_jobs import outdir
from beam_jobs.commit.append import read_known
from beam_jobs.commit.finalize import Finalize, FinalizeInputs
from beam_jobs.core.run_dir import RunDir
from beam_jobs.cut.duplicates import FindDuplicates
from beam_jobs.cut.examples import PLAN, WRITE
from beam_jobs.job import command_line, flags, lifecycle, outcome, runners
from beam_jobs.job.errors import Failed, Refused
from beam_jobs.job.launch import Launch
from beam_jobs.shuffle.place import WriteInPlace
from beam_jobs.shuffle.write import WriteShuffledShards
from beam_jobs.sources import SourceError, build_source
from readers import format as data_format


def build_pipeline(pipeline: beam.Pipeline, launch: Launch, run: RunDir, workers: int = 1,
                   base: Optional[data_format.DatasetSpec] = None) -> None:
    """Read the videos, cut them into windows, write the windows as shuffled shards (but
    those of duplicate ids, of videos whose frames another has, of videos that failed
    half-way), then the side files; commit dataset.json. `base`: an --append's dataset."""
    source, shard_config = launch.source, launch.shard_config()
    placing = PLAN if shard_config.mode == "place" else None   # reads twice: shuffle/place.py
    known = (None if base is None else
             read_known(pipeline, run.output_dir, base, launch.config.io.retry_failed))
    videos, read_failures, skipped = pipeline | "ReadVideos" >> source.read(known and known.ids)
    known_digests = known.digests if known else None   # a new dataset: no steps for them
    cut = videos | "CutWindows" >> launch.cut_windows(workers, known_digests, placing)
    duplicates = ((cut.videos, cut.abandoned, cut.bad_frames)
                  | "FindDuplicates" >> FindDuplicates(launch.cut_config(), known_digests))
    dropped = beam.pvalue.AsSingleton(duplicates.dropped, default_value={})
    shards = cut.examples | "WriteShards" >> (
        WriteInPlace(run, shard_config, dropped, cut.checked, source.read(known and known.ids),
                     launch.cut_windows(workers, known_digests, WRITE)) if placing
        else WriteShuffledShards(run, shard_config, dropped))
    failures = (read_failures, cut.failures, duplicates.failures) | "AllFailures" >> beam.Flatten()
    skipped = (skipped, duplicates.aliases) | "AllSkipped" >> beam.Flatten()
    (FinalizeInputs(shards, duplicates.unique, failures, duplicates.bad_frames, skipped, cut.stats,
                    duplicates.dropped) | "Finalize" >> Finalize(run, launch.dataset_config, known))


def run(argv: Optional[list[str]] = None, started: Optional[float] = None,
        encoder: Any = None, fork_workers: bool = False) -> beam.runners.runner.PipelineResult:
    """Run the job: parse the flags, build the source, claim the output directory, run
    the pipeline, and leave the directory committed or as it was.

    Until the commit (one move of dataset.json, a step of the pipeline) the directory's
    dataset is the one before, whatever stops this run. On a distributed runner the
    pipeline also cleans up and releases the lease, so with --detach this returns once
    the job is submitted; Ctrl-C in a launcher that waits cancels the job.

    Args:
      argv: the command line without the program name: the job's flags (--help lists
        them) and Beam pipeline options.
      started: time.monotonic() when the command started (default: now).
      encoder: any Beam RunInference ModelHandler, the frame encoder instead of an
        --encoder file (load_model once per worker, run_inference per frame batch).
      fork_workers: --all_cores's workers are forks of this process, which must not
        have run a pipeline yet (runtime/forked_workers.py; main() asks for it).

    Returns:
      Beam's PipelineResult, once the job is done (or submitted, with --detach).

    Raises:
      Refused: a flag, an input or an output directory this run cannot take: nothing
        was done. Failed: no new dataset (too many failures, no window, a full disk).
    """
    config, pipeline_args = flags.parse_args(argv, encoder)
    runner = command_line.runner_name(pipeline_args)
    config = runners.for_runner(config, runner, pipeline_args)
    try:
        source = build_source(config)
    except SourceError as e:
        raise Refused(str(e)) from None
    launch = Launch.settle(config, pipeline_args, runner, source, started)
    if launch.dry_run:   # no lease: the directory is not touched
        return _run(launch, outdir.Claim(RunDir(config.io.output_dir, "dry-run", ""), None,
                                         False))
    with lifecycle.workers(launch, fork_workers) as workers, lifecycle.claimed(launch) as claim:
        return _run(launch, claim, workers)


def _run(launch: Launch, claim: outdir.Claim, workers: Any = None
         ) -> beam.runners.runner.PipelineResult:
    """Build and run the pipeline (`workers`: forked workers' environment, or None)."""
    launch.note_group_memory()
    with lifecycle.submission_temp(launch):
        options = launch.options(forked_workers=workers is not None)
        with lifecycle.beam_temp_in(claim.run):   # Beam's temp folder: where a kill leaves it
            pipeline = beam.Pipeline(runner=FnApiRunner(default_environment=workers)
                                     if workers else None, options=options)
        build_pipeline(pipeline, launch, claim.run,
                       options.view_as(DirectOptions).direct_num_workers, claim.base)
        result = pipeline.run()
    return outcome.finish(result, launch, claim)


def main(argv: Optional[list[str]] = None) -> int:
    """The command: run(), and how it ended as an exit status, said in one line on
    stderr: 0 done, 1 failed, 2 refused, 130 interrupted. `argv`: the command line
    without the program name (default: sys.argv[1:])."""
    lifecycle.quiet_logging()
    with lifecycle.interrupts():
        try:
            run(sys.argv[1:] if argv is None else argv, started=_STARTED, fork_workers=True)
        except (Refused, Failed) as e:
            print(f"{flags.PROG}: error: {e}", file=sys.stderr, flush=True)
            return 2 if isinstance(e, Refused) else 1
        except KeyboardInterrupt as e:  # one line, no traceback
            print(f"{flags.PROG}: interrupted: {str(e) or lifecycle.directory_state()}",
                  file=sys.stderr, flush=True)
            return lifecycle.INTERRUPTED_STATUS
    return 0


if __name__ == "__main__":
    lifecycle.exit_now(main())
