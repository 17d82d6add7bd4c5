"""The job's last steps, inside the pipeline: the sidecar files, the decision (commit or
not, commit/decide.py), the commit (one move of dataset.json into place), the cleanup
after it, and the lease's release. A launcher that submits and exits leaves a job that
commits on its own."""
from __future__ import annotations

import logging
from typing import NamedTuple, Optional

import apache_beam as beam

from beam_jobs import outdir
from beam_jobs.commit import append, decide
from beam_jobs.commit.dataset import DatasetConfig, build_spec
from beam_jobs.commit.failures import MergeFailures
from beam_jobs.commit.leftovers import ClearLeftovers
from beam_jobs.commit.sidecars import JsonlFile, WriteSortedJsonl
from beam_jobs.commit.split_stats import SplitStats
from beam_jobs.commit.tally import FAILED, SHARD, SKIPPED, TWICE, VIDEO, Tally, TallyFn
from beam_jobs.core import progress, storage
from beam_jobs.core.gather import ApplyToAll
from beam_jobs.core.records import VideoCount
from beam_jobs.core.run_dir import RunDir
from readers import format as data_format

_LOG = logging.getLogger("beam_jobs.commit")

# The counters the launcher reads: one per outcome, and the counts a decision takes.
OUTCOME_COUNTERS = {decide.COMMIT: "datasets_committed",
                    decide.NOTHING_NEW: "appends_with_nothing_new",
                    decide.TOO_MANY_FAILURES: "runs_with_too_many_failures",
                    decide.NO_WINDOW: "datasets_without_windows",
                    decide.IDS_TWICE: "datasets_with_ids_twice"}
GOOD_VIDEOS, FAILED_VIDEOS, WINDOWS = "videos_ok", "videos_failed", "windows_committed"
LONGEST_VIDEO = "longest_video_frames"   # a distribution: its max
SKIPPED_EXISTING = "videos_skipped_existing"
IDS_TWICE = "video_ids_twice"


class FinalizeInputs(NamedTuple):
    """What `Finalize` takes through the pipe."""
    shards: beam.PCollection       # SplitShard, one per shard written
    videos: beam.PCollection       # VideoCount of every video that gave no failure
    failures: beam.PCollection     # failure rows
    bad_frames: beam.PCollection   # rows of bad_frames.jsonl
    skipped: beam.PCollection      # ids of the input videos an --append skipped
    stats: beam.PCollection        # VideoStats of every video that stores a frame
    dropped: beam.PCollection      # {split: keys the shard writer leaves out}, one element


def _failure_key(row: dict) -> tuple:
    return (row["source"], -1 if row["record_index"] is None else row["record_index"],
            row["video_id"] or "")


def sidecar_files(run_id: str) -> tuple[JsonlFile, ...]:
    """The sidecars a run writes, named by its run id, and the order of their rows."""
    def name(kind: str) -> str:
        return data_format.sidecar_name(kind, run_id)
    return (JsonlFile(name("videos"), lambda row: (row["split"], row["video_id"])),
            JsonlFile(name("failures"), _failure_key),
            JsonlFile(name("bad_frames"),
                      lambda row: (row["video_id"], row["source"], row["frame"]),
                      when_empty=False))


def _count(tally: Tally, decision: decide.Decision) -> None:
    counts = tally.decision_counts()
    progress.counter(OUTCOME_COUNTERS[decision.outcome]).inc()
    progress.counter(GOOD_VIDEOS).inc(counts.good)
    progress.counter(FAILED_VIDEOS).inc(counts.failed)
    progress.counter(WINDOWS).inc(counts.windows)
    progress.distribution(LONGEST_VIDEO).update(counts.longest)
    progress.counter(SKIPPED_EXISTING).inc(tally.skipped)
    progress.counter(IDS_TWICE).inc(tally.twice)


def finalize(tally: Tally, sidecars: list[str], stats: dict, *, run: RunDir,
             config: DatasetConfig, base: Optional[data_format.DatasetSpec] = None) -> bool:
    """After the shards (`tally.shards`) and the sidecar files are written (`sidecars`:
    their names, in the run folder), commit the dataset when `decide` says so and this
    run still holds the directory's lease; whether it committed. `stats`: {split:
    {feature: ChannelStats}} of the frames the kept videos store.

    Not committing leaves the directory, and any dataset in it, unchanged: the shards are
    removed again and the sidecars stay in the run folder, which stays (an append with
    nothing new leaves no run folder). `base`: the dataset an --append adds a
    generation to.
    """
    decision = decide.decide(tally.decision_counts(), config.max_failure_fraction,
                             config.windows.length, appending=base is not None)
    _count(tally, decision)
    if not decision.commits:   # shards of no window (nothing new) go too
        _discard(run, tally, whole=decision.outcome == decide.NOTHING_NEW)
        return False
    dataset = build_spec(config, run.run_id, tally, sidecars, base, stats)
    lost = outdir.LeaseLost(run.output_dir)
    if not outdir.holds_lease(run):
        raise lost
    try:
        committed = commit(run, dataset, sidecars)
    except (FileNotFoundError, FileExistsError):
        if outdir.holds_lease(run):
            raise
        raise lost from None
    if not committed:
        _LOG.warning("its launcher cancelled run %s: it commits nothing, and %s holds what "
                     "it held before", run.run_id, run.output_dir)
        _discard(run, tally, whole=False)
    return committed


def _discard(run: RunDir, tally: Tally, whole: bool) -> None:
    """A run that does not commit: its shards, then its temp data (`whole`: its whole
    folder, which then holds nothing the next run needs to see)."""
    storage.delete_files([run.output(name) for _, s in tally.shards
                          for name in (s.file, s.index, s.table) if name], run.output_dir)
    if whole:
        outdir.delete_run_folder(run)
    else:
        outdir.delete_temp(run)


def commit(run: RunDir, dataset: data_format.DatasetSpec, sidecars: list[str]) -> bool:
    """The commit: dataset.json written into the run folder (a full disk stops the run
    here, before anything in the directory changed), the sidecars (named by this run's
    id, so no reader of the dataset before sees them) moved from the run folder into the
    directory, then dataset.json moved over the directory's (locally a rename; on GCS one
    copy, atomic), which names this run's shards and sidecars. Until this move, the
    directory's dataset is the one before, whole; from it on, this one. Then the derived
    TFDS file is rewritten (outdir/derived.py; where a kill comes first, the next run
    does it). False, committing nothing, when the run's launcher cancelled it
    (outdir.fence_commit)."""
    if not outdir.committed(run):   # a retry of this step after the move does the rest
        staged = run.in_run_folder(data_format.DATASET_JSON)
        # Fenced by the lease: a run that took the lease over deleted this run's folder
        # first (nothing to move then), and on GCS dataset.json must be the one it was.
        storage.write_bytes(staged, dataset.to_json().encode("utf-8"), make_dirs=False)
        if outdir.commit_fenced(run):   # read after the staging: fence_commit says why
            storage.delete_files([staged], run.output_dir)
            return False
        for name in sidecars:
            if storage.kind(run.in_run_folder(name)) != "missing":   # else moved already
                storage.place(run.in_run_folder(name), run.output(name))
        storage.place(staged, run.output(data_format.DATASET_JSON), run.dataset_generation)
    outdir.write_derived(run.output_dir, dataset)
    return True


class _IdsTwice(beam.PTransform):
    """Rows of the videos.jsonl about to be committed -> (TWICE, 1) per video id they
    list more than once (none, unless the committed videos file was tampered with): the
    commit's own check that it lists each video once, as `--verify` will."""

    def expand(self, rows):
        return (rows | "Ids" >> beam.Map(lambda row: (row["video_id"], 1))
                | "Count" >> beam.CombinePerKey(sum)
                | "Twice" >> beam.Filter(lambda kv: kv[1] > 1)
                | "Tally" >> beam.Map(lambda _: (TWICE, 1)))


def _clean_up(results: list[bool], run: RunDir) -> None:
    """After the commit, best-effort (a failure is a warning; the dataset stays whole)."""
    if any(results):
        outdir.clean_up_after_commit(run)


class Finalize(beam.PTransform):
    """`FinalizeInputs` -> `finalize`, once, after the last shard and sidecar file is
    written, then the cleanup after a commit and the lease's release. Only small rows
    reach its one task: the counts and a row per shard (one combine) and the sidecars'
    names. The sidecar files are written sorted in parts (`sidecars.WriteSortedJsonl`):
    videos.jsonl by (split, video_id), failures.jsonl by (source, record_index,
    video_id), bad_frames.jsonl by (video_id, source, frame).

    `known`: what an --append knows of the dataset it adds to; the new sidecars keep its
    rows (failures: commit/failures.py). The statistics are combined per split
    (commit/split_stats.py), a few numbers a channel, and reach the commit as a side input.
    """

    def __init__(self, run: RunDir, config: DatasetConfig,
                 known: Optional[append.Known] = None):
        super().__init__()
        self._run, self._config, self._known = run, config, known

    @beam.typehints.no_annotations   # a tuple of PCollections: mypy's, not Beam's
    def expand(self, inputs: FinalizeInputs):
        run, known = self._run, self._known
        video_rows = inputs.videos | "VideoRows" >> beam.Map(VideoCount.to_json)
        bad_frames = inputs.bad_frames
        failures = inputs.failures
        failed = failures | "TallyFailed" >> beam.Map(lambda row: (FAILED, row.get("records", 1)))
        if known is not None:
            video_rows = (video_rows, known.videos) | "AllVideoRows" >> beam.Flatten()
            bad_frames = (bad_frames, known.bad_frames) | "AllBadFrames" >> beam.Flatten()
            failures, failed = (
                failures, known.failures,
                inputs.videos | "GoodIds" >> beam.Map(lambda v: v.video_id)
            ) | "RememberFailures" >> MergeFailures()
        tallied = [inputs.videos | "TallyVideos" >> beam.Map(lambda v: (VIDEO, v)),
                   inputs.shards | "TallyShards" >> beam.Map(lambda s: (SHARD, s)), failed,
                   inputs.skipped | "TallySkipped" >> beam.Map(lambda _: (SKIPPED, 1))]
        tallied.append(video_rows | "IdsTwice" >> _IdsTwice())
        names = (video_rows, failures, bad_frames) | "Sidecars" >> WriteSortedJsonl(
            run, sidecar_files(run.run_id))
        if run.leftovers:   # a distributed run clears earlier runs' leftovers itself
            inputs.shards.pipeline | "ClearLeftovers" >> ClearLeftovers(run)
        tally = (tuple(tallied) | "AllTallied" >> beam.Flatten()
                 | "Tally" >> beam.CombineGlobally(TallyFn()))
        stats = (inputs.stats, inputs.dropped) | "SplitStats" >> SplitStats()
        # Three stages, so that a runner that retries one (Dataflow retries a failed
        # bundle) repeats that step alone; each may run again after its side effects.
        return (tally
                | "Commit" >> beam.Map(finalize, beam.pvalue.AsSingleton(names),
                                       beam.pvalue.AsDict(stats), run=run,
                                       config=self._config, base=known and known.spec)
                | "CleanUp" >> ApplyToAll(lambda results: _clean_up(results, run))
                | "ReleaseLease" >> ApplyToAll(lambda _: outdir.release_lease(run)))
