"""The job's last steps: failures.jsonl, the failure threshold, then the commit (one
write of dataset.json), the cleanup after it, and the lease's release."""
from __future__ import annotations

import dataclasses
import json
from typing import Any, Mapping, Optional, Sequence

import apache_beam as beam

from beam_jobs import __version__, duplicates, progress, storage
from beam_jobs.cut import VideoCount, WindowConfig
from beam_jobs.output_dir import RunDir
from beam_jobs.shard_writer import WrittenShard
from readers import format as data_format

COMMITTED = "datasets_committed"


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


def _split_counts(videos: list[VideoCount]) -> dict[str, dict]:
    """{split: {"videos", "windows", "skipped_short", "frames", "bad_frames"}}."""
    counts: dict[str, dict] = {}
    for video in videos:
        row = counts.setdefault(video.split, _empty_counts())
        row["videos" if video.windows else "skipped_short"] += 1
        row["windows"] += video.windows
        row["bad_frames"] += video.bad_frames
        row["frames"] += video.frames
    return counts


def _empty_counts() -> dict:
    return {"videos": 0, "windows": 0, "skipped_short": 0, "frames": 0, "bad_frames": 0}


def _jsonl(rows: list[dict]) -> bytes:
    return "".join(json.dumps(row, sort_keys=True) + "\n" for row in rows).encode("utf-8")


def finalize(written: list[WrittenShard], videos: list[VideoCount], failures: list[dict],
             bad_frames: list[dict], *, run: RunDir, config: DatasetConfig) -> bool:
    """Commit failures.jsonl, bad_frames.jsonl, videos.jsonl and dataset.json when the
    failure fraction allows it and this run still holds the directory's lease; whether
    it committed.

    Videos whose id came more than once are failures (their windows were left out of
    the shards). Over the threshold, the shards are removed again and the sidecars go
    to the run folder, which stays: the directory, and any dataset in it, is unchanged.
    """
    videos, duplicate_failures = duplicates.set_aside(videos)
    videos = sorted(videos, key=lambda v: (v.split, v.video_id))
    counts = _split_counts(videos)
    failures = sorted(failures + duplicate_failures, key=lambda f: (
        f["source"], f["record_index"] if f["record_index"] is not None else -1,
        f["video_id"] or ""))
    sidecars = {data_format.FAILURES_JSONL: failures,
                data_format.VIDEOS_JSONL: [v.to_json() for v in videos]}
    if bad_frames:
        sidecars[data_format.BAD_FRAMES_JSONL] = sorted(
            bad_frames, key=lambda row: (row["video_id"], row["source"], row["frame"]))
    sidecars = {name: _jsonl(rows) for name, rows in sidecars.items()}
    good = sum(row["videos"] + row["skipped_short"] for row in counts.values())
    failed = sum(row.get("records", 1) for row in failures)
    progress.counter("videos_ok").inc(good)
    progress.counter("videos_failed").inc(failed)
    shards = sorted(written)
    if failed and failed / (failed + good) > config.max_failure_fraction:
        for name, data in sidecars.items():
            storage.write_bytes(run.in_run_folder(name), data)
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
        run_id=run.run_id,
        files=tuple(sorted([s.file for s in shards] + [s.offsets for s in shards if s.offsets]
                           + list(sidecars))),
        job_version=__version__, input_kind=config.input_kind, frame=config.frame,
        labels=config.labels, encoder=config.encoder and {
            **config.encoder, "devices_used": sorted({v.encoder_device for v in videos
                                                       if v.encoder_device})},
        splits={split: data_format.SplitInfo(
                    **counts.get(split, empty),
                    shards=tuple(data_format.Shard(s.file, s.examples, s.offsets)
                                 for s in shards if s.split == split))
                for split in config.windows.splits})
    commit(run, dataset, sidecars)
    return True


def commit(run: RunDir, dataset: data_format.DatasetSpec, sidecars: Mapping[str, bytes]
           ) -> None:
    """The commit: the sidecars, then dataset.json in one write (locally a temp file
    renamed over it; on GCS one upload), which names this run's shards. Until this
    write, the directory's dataset is the one before, whole; from it on, this one."""
    for name, data in sidecars.items():
        storage.write_bytes(run.output(name), data)
    storage.write_bytes(run.output(data_format.DATASET_JSON), dataset.to_json().encode("utf-8"))
    progress.counter(COMMITTED).inc()


def _clean_up(committed: bool, run: RunDir) -> None:
    """After the commit, best-effort (a failure is a warning; the dataset stays whole)."""
    if committed:
        run.clean_up_after_commit()


def _release_lease(_, run: RunDir) -> None:
    run.release_lease()


class Finalize(beam.PTransform):
    """The written shards -> `finalize`, once, after the last shard is written: the run's
    small rows are gathered into one task, which alone decides whether a dataset exists.

    `videos`: every video's VideoCount, already gathered into one list (the list that
    duplicate ids are found in); `failures`: the PCollections of failure rows.
    """

    def __init__(self, run: RunDir, config: DatasetConfig, videos: beam.PCollection,
                 failures: Sequence[beam.PCollection], bad_frames: beam.PCollection):
        super().__init__()
        self._run, self._config = run, config
        self._videos, self._failures, self._bad_frames = videos, failures, bad_frames

    def expand(self, written):
        failures = (tuple(self._failures) | "AllFailures" >> beam.Flatten()
                    | "GatherFailures" >> beam.combiners.ToList())
        bad_frames = self._bad_frames | "GatherBadFrames" >> beam.combiners.ToList()
        return (written
                | "GatherShards" >> beam.combiners.ToList()
                | "Commit" >> beam.Map(
                    finalize, beam.pvalue.AsSingleton(self._videos),
                    beam.pvalue.AsSingleton(failures), beam.pvalue.AsSingleton(bad_frames),
                    run=self._run, config=self._config)
                | "CleanUp" >> beam.Map(_clean_up, run=self._run)
                | "ReleaseLease" >> beam.Map(_release_lease, run=self._run))
