"""The job's last steps: the sidecar files, the failure threshold (and a run without a
window: no commit either), then the commit (one move of dataset.json into place), the
cleanup after it, and the lease's release."""
from __future__ import annotations

import dataclasses
from typing import Any, Mapping, NamedTuple, Optional, Sequence

import apache_beam as beam

from beam_jobs import __version__, append, progress, storage
from beam_jobs.cut import VideoCount, WindowConfig
from beam_jobs.output_dir import RunDir
from beam_jobs.shard_writer import WrittenShard
from beam_jobs.sidecars import JsonlFile, WriteSortedJsonl
from readers import format as data_format
from readers.format import tfds_info

COMMITTED = "datasets_committed"
# A run that cut no window commits nothing: counted here, with the longest video's frames
# (a distribution, whose max the launcher reads) for its one-line error.
NOTHING_TO_COMMIT, LONGEST_VIDEO = "datasets_without_windows", "longest_video_frames"
# An --append whose every input video the dataset has: no commit, and no error.
NOTHING_NEW = "appends_with_nothing_new"


@dataclasses.dataclass(frozen=True)
class DatasetConfig:
    """What dataset.json says besides the counts, and when the run fails instead."""
    features: tuple[data_format.FeatureSpec, ...]
    windows: WindowConfig
    compression: str
    max_failure_fraction: float
    flags: Mapping[str, Any] = dataclasses.field(default_factory=dict)
    encoder: Optional[Mapping[str, Any]] = None
    input_kind: Optional[str] = None
    frame: Mapping[str, Any] = dataclasses.field(default_factory=dict)
    labels: Optional[Mapping[str, Any]] = None


class Tally(NamedTuple):
    """What finalize counts of the run: per split {"videos", "windows", "skipped_short",
    "frames", "bad_frames"} of the videos that gave no failure, the sorted encoder
    devices that cut them, the longest video's frames, the failed input records or
    videos, the videos an --append skipped, and the rows of the videos.jsonl it adds to."""
    counts: dict
    devices: list
    longest: int = 0
    failed: int = 0
    skipped: int = 0
    base_rows: int = 0


class _Tally(beam.CombineFn):
    """(kind, value) rows -> a Tally, in one combine: ("video", VideoCount), ("failed",
    records), ("skipped", 1), ("base_row", 1). One step for every count, where a combine
    each would cost the job a fixed time each to build and run."""

    def create_accumulator(self):
        return Tally({}, set())

    def add_input(self, tally: Tally, row) -> Tally:
        kind, value = row
        if kind != "video":
            return tally._replace(**{_TALLIED[kind]: getattr(tally, _TALLIED[kind]) + value})
        row = tally.counts.setdefault(value.split, _empty_counts())
        row["videos" if value.windows else "skipped_short"] += 1
        row["windows"] += value.windows
        row["bad_frames"] += value.bad_frames
        row["frames"] += value.frames
        if value.encoder_device:
            tally.devices.add(value.encoder_device)
        return tally._replace(longest=max(tally.longest, value.frames))

    def merge_accumulators(self, tallies) -> Tally:
        merged = self.create_accumulator()
        for tally in tallies:
            for split, row in tally.counts.items():
                into = merged.counts.setdefault(split, _empty_counts())
                for name, value in row.items():
                    into[name] += value
            merged.devices.update(tally.devices)
            merged = merged._replace(longest=max(merged.longest, tally.longest), **{
                name: getattr(merged, name) + getattr(tally, name)
                for name in _TALLIED.values()})
        return merged

    def extract_output(self, tally: Tally) -> Tally:
        return tally._replace(devices=sorted(tally.devices))


_TALLIED = {"failed": "failed", "skipped": "skipped", "base_row": "base_rows"}


def _empty_counts() -> dict:
    return {"videos": 0, "windows": 0, "skipped_short": 0, "frames": 0, "bad_frames": 0}


def finalize(written: list[WrittenShard], tally: Tally, sidecars: list[str], *, run: RunDir,
             config: DatasetConfig, base: Optional[data_format.DatasetSpec] = None) -> bool:
    """After the sidecar files are written into the run folder (`sidecars`: their names),
    commit the dataset when the failure fraction allows it, it holds a window, and this
    run still holds the directory's lease; whether it committed.

    `tally`: the run's counts (`Tally`). Over the threshold, or without a window, the shards
    are removed again and the sidecars stay in the run folder, which stays: the
    directory, and any dataset in it, is unchanged.

    `base`: the dataset an --append adds a generation to (`tally.skipped`: the input
    videos it had; `tally.base_rows`: the rows of its videos.jsonl). The new videos' windows are
    committed even when there are none (too short: their ids are then known); with no
    new video at all nothing is committed, and the run folder goes.
    """
    counts, devices_used, longest, failed, skipped, base_rows = tally
    good = sum(row["videos"] + row["skipped_short"] for row in counts.values())
    progress.counter("videos_ok").inc(good)
    progress.counter("videos_failed").inc(failed)
    progress.counter(append.SKIPPED_EXISTING).inc(skipped)
    shards = sorted(written)
    if base is not None:
        listed = sum(s.videos + s.skipped_short for s in base.splits.values())
        if base_rows != listed:
            raise RuntimeError(
                f"{run.output(data_format.VIDEOS_JSONL)} lists {base_rows} videos, its "
                f"dataset.json {listed}: it is not the dataset's own (a commit stopped "
                "half-way?), so the ids to skip are not known; rebuild with --overwrite")
        if not good and not failed:
            progress.counter(NOTHING_NEW).inc()
            run.delete_run_folder()
            return False
    over_threshold = failed and failed / (failed + good) > config.max_failure_fraction
    if over_threshold or (base is None and not any(row["windows"] for row in counts.values())):
        if not over_threshold:
            progress.counter(NOTHING_TO_COMMIT).inc()
            progress.distribution(LONGEST_VIDEO).update(longest)
        storage.delete_files([run.output(name) for s in shards
                              for name in (s.file, s.offsets) if name], run.output_dir)
        run.delete_temp()
        return False
    empty = _empty_counts()
    for split in config.windows.splits:
        in_shards = sum(s.examples for s in shards if s.split == split)
        if in_shards != counts.get(split, empty)["windows"]:
            raise RuntimeError(f"split {split}: {in_shards} examples in the shards, "
                               f"{counts.get(split, empty)['windows']} windows cut")
    if not run.holds_lease():
        raise RuntimeError(f"another run took the lease on {run.output_dir}; this run "
                           "does not commit its dataset")
    dataset = data_format.DatasetSpec(
        window=config.windows.to_json(), features=tuple(config.features),
        compression=config.compression, failures=failed, flags=dict(config.flags),
        run_id=run.run_id, generations=(data_format.Generation(
            run.run_id, sum(row["videos"] for row in counts.values()),
            sum(row["windows"] for row in counts.values()),
            sum(row["skipped_short"] for row in counts.values()), failed, skipped,
            __version__),),
        files=tuple(sorted([s.file for s in shards] + [s.offsets for s in shards if s.offsets]
                           + sidecars + list(tfds_info.file_names(config.compression)))),
        job_version=__version__, input_kind=config.input_kind, frame=config.frame,
        labels=config.labels, encoder=config.encoder and {
            **config.encoder, "devices_used": devices_used},
        splits={split: data_format.SplitInfo(
                    **counts.get(split, empty),
                    shards=tuple(data_format.Shard(s.file, s.examples, s.offsets)
                                 for s in shards if s.split == split))
                for split in config.windows.splits})
    if base is not None:
        dataset = append.extend(base, dataset)
    commit(run, dataset, sidecars)
    return True


def commit(run: RunDir, dataset: data_format.DatasetSpec, sidecars: list[str]) -> None:
    """The commit: dataset.json and the TFDS files (tfds_info, from the same spec)
    written into the run folder (a full disk stops the run here, before anything in the
    directory changed), the sidecars and TFDS files moved from the run folder into the
    directory, then dataset.json moved over the directory's (locally a rename; on GCS one
    copy, atomic), which names this run's shards. Until this move, the directory's
    dataset is the one before, whole (its shards untouched); from it on, this one."""
    staged = run.in_run_folder(data_format.DATASET_JSON)
    storage.write_bytes(staged, dataset.to_json().encode("utf-8"))
    tfds_files = tfds_info.files(dataset)
    for name, data in tfds_files.items():
        storage.write_bytes(run.in_run_folder(name), data)
    for name in [*sidecars, *tfds_files]:
        storage.place(run.in_run_folder(name), run.output(name))
    storage.place(staged, run.output(data_format.DATASET_JSON))
    progress.counter(COMMITTED).inc()


def _clean_up(committed: bool, run: RunDir) -> None:
    """After the commit, best-effort (a failure is a warning; the dataset stays whole)."""
    if committed:
        run.clean_up_after_commit()


def _release_lease(_, run: RunDir) -> None:
    run.release_lease()


def _failure_key(row: dict) -> tuple:
    return (row["source"], -1 if row["record_index"] is None else row["record_index"],
            row["video_id"] or "")


SIDECAR_FILES = (
    JsonlFile(data_format.VIDEOS_JSONL, lambda row: (row["split"], row["video_id"])),
    JsonlFile(data_format.FAILURES_JSONL, _failure_key),
    JsonlFile(data_format.BAD_FRAMES_JSONL,
              lambda row: (row["video_id"], row["source"], row["frame"]), when_empty=False))


class Finalize(beam.PTransform):
    """The written shards -> `finalize`, once, after the last shard and sidecar file is
    written, then the cleanup after a commit and the lease's release, all inside the
    pipeline (a launcher that submits and exits leaves a job that commits on its own). Only small rows reach its one task: a row per shard, the counts (from
    combiners) and the sidecars' names. The sidecar files are written sorted in parts
    (`sidecars.WriteSortedJsonl`): videos.jsonl by (split, video_id), failures.jsonl
    by (source, record_index, video_id), bad_frames.jsonl by (video_id, source, frame).

    `videos`: the VideoCount of every video that gave no failure; `failures`: the
    PCollections of failure rows; `bad_frames`: rows of bad_frames.jsonl; `skipped`: the
    ids of the input videos an --append skipped, and `known` the dataset it adds to,
    whose rows of videos.jsonl and bad_frames.jsonl the new files keep (failures.jsonl
    is the run's own).
    """

    def __init__(self, run: RunDir, config: DatasetConfig, videos: beam.PCollection,
                 failures: Sequence[beam.PCollection], bad_frames: beam.PCollection,
                 skipped: beam.PCollection, known: Optional[append.Known] = None):
        super().__init__()
        self._run, self._config = run, config
        self._videos, self._failures, self._bad_frames = videos, failures, bad_frames
        self._skipped, self._known = skipped, known

    def expand(self, written):
        run, known = self._run, self._known
        failures = tuple(self._failures) | "AllFailures" >> beam.Flatten()
        video_rows = self._videos | "VideoRows" >> beam.Map(VideoCount.to_json)
        bad_frames = self._bad_frames
        if known is not None:
            video_rows = (video_rows, known.videos) | "AllVideoRows" >> beam.Flatten()
            bad_frames = (bad_frames, known.bad_frames) | "AllBadFrames" >> beam.Flatten()
        names = (video_rows, failures, bad_frames) | "Sidecars" >> WriteSortedJsonl(
            run, SIDECAR_FILES)
        tallied = [self._videos | "TallyVideos" >> beam.Map(lambda v: ("video", v)),
                   failures | "TallyFailed" >> beam.Map(
                       lambda row: ("failed", row.get("records", 1))),
                   self._skipped | "TallySkipped" >> beam.Map(lambda _: ("skipped", 1))]
        if known is not None:
            tallied.append(known.videos | "TallyBaseRows" >> beam.Map(lambda _: ("base_row", 1)))
        tally = tuple(tallied) | "AllTallied" >> beam.Flatten() | "Tally" >> beam.CombineGlobally(
            _Tally())
        return (written
                | "GatherShards" >> beam.combiners.ToList()
                | "Commit" >> beam.Map(
                    finalize, beam.pvalue.AsSingleton(tally), beam.pvalue.AsSingleton(names),
                    run=run, config=self._config, base=known and known.spec)
                | "CleanUp" >> beam.Map(_clean_up, run=run)
                | "ReleaseLease" >> beam.Map(_release_lease, run=run))
