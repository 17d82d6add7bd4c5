"""The job's last step: failures.jsonl, the failure threshold, then dataset.json."""
from __future__ import annotations

import collections
import dataclasses
import json
from typing import Any, Mapping, Optional

import apache_beam as beam

from beam_jobs import progress, storage
from beam_jobs.examples import VideoCount, WindowConfig
from beam_jobs.output_dir import RunDir
from beam_jobs.shard_writer import WrittenShard
from beam_jobs.sources.base import failure
from readers import spec as spec_lib

COMMITTED = "datasets_committed"


@dataclasses.dataclass(frozen=True)
class DatasetConfig:
    """What dataset.json says besides the counts, and when the run fails instead."""
    features: tuple[spec_lib.FeatureSpec, ...]
    windows: WindowConfig
    compression: str
    max_failure_fraction: float
    flags: Mapping[str, Any] = dataclasses.field(default_factory=dict)
    encoder: Optional[Mapping[str, Any]] = None


class CountVideos(beam.CombineFn):
    """VideoCount rows -> {split: {"videos", "windows", "skipped_short", "frames",
    "bad_frames"}}."""

    def create_accumulator(self):
        return {}

    def add_input(self, acc, count: VideoCount):
        _add(acc, count, +1)
        return acc

    def merge_accumulators(self, accumulators):
        merged = {}
        for acc in accumulators:
            for split, row in acc.items():
                total = merged.setdefault(split, _empty_counts())
                for name, value in row.items():
                    total[name] += value
        return merged

    def extract_output(self, acc):
        return acc


def _add(acc: dict, count: VideoCount, sign: int) -> None:
    row = acc.setdefault(count.split, _empty_counts())
    row["videos" if count.windows else "skipped_short"] += sign
    row["windows"] += sign * count.windows
    row["bad_frames"] += sign * count.bad_frames
    row["frames"] += sign * count.frames


def _empty_counts() -> dict:
    return {"videos": 0, "windows": 0, "skipped_short": 0, "frames": 0, "bad_frames": 0}


def _jsonl(rows: list[dict]) -> bytes:
    return "".join(json.dumps(row, sort_keys=True) + "\n" for row in rows).encode("utf-8")


def duplicate_failures(duplicates: list[VideoCount]) -> list[dict]:
    """One failure row per occurrence of a video id that came more than once."""
    by_id = collections.defaultdict(list)
    for count in duplicates:
        by_id[count.video_id].append(count)
    rows = []
    for video_id, counts in by_id.items():
        where = "; ".join(f"{c.source}" + ("" if c.record_index is None else
                                           f" #{c.record_index}") for c in counts[:4])
        for c in counts:
            rows.append(failure(c.source, c.record_index, video_id,
                                f"the video id appears {len(counts)} times ({where}): "
                                "no copy is used"))
    return rows


def finalize(written: list[WrittenShard], counts: Mapping[str, Mapping[str, int]],
             failures: list[dict], bad_frames: list[dict], duplicates: list[VideoCount],
             *, run: RunDir, config: DatasetConfig) -> None:
    """Write failures.jsonl and bad_frames.jsonl, then dataset.json when the failure
    fraction allows it and this run still holds the directory's lease.

    Over the threshold, the shards are removed again: a directory without dataset.json
    holds no dataset, whatever else lies in it. The run folder stays, so that the next
    run knows failures.jsonl is the job's.
    """
    counts = {split: dict(row) for split, row in counts.items()}
    for count in duplicates:
        _add(counts, count, -1)
    failures = sorted(failures + duplicate_failures(duplicates), key=lambda f: (
        f["source"], f["record_index"] if f["record_index"] is not None else -1,
        f["video_id"] or ""))
    sidecars = {spec_lib.FAILURES_JSONL: failures}
    if bad_frames:
        sidecars[spec_lib.BAD_FRAMES_JSONL] = sorted(
            bad_frames, key=lambda row: (row["video_id"], row["source"], row["frame"]))
    for name, rows in sidecars.items():
        storage.write_bytes(run.output(name), _jsonl(rows))
    good = sum(row["videos"] + row["skipped_short"] for row in counts.values())
    failed = sum(row.get("records", 1) for row in failures)
    progress.counter("videos_ok").inc(good)
    progress.counter("videos_failed").inc(failed)
    shards = sorted(written)
    if failed and failed / (failed + good) > config.max_failure_fraction:
        storage.delete_files([run.output(s.file) for s in shards], run.output_dir)
        run.delete_temp()
        return
    empty = _empty_counts()
    for split in config.windows.splits:
        in_shards = sum(s.examples for s in shards if s.split == split)
        if in_shards != counts.get(split, empty)["windows"]:
            raise RuntimeError(f"split {split}: {in_shards} examples in the shards, "
                               f"{counts.get(split, empty)['windows']} windows cut")
    if not run.holds_lease():
        raise RuntimeError(f"another run took the lease on {run.output_dir}; this run "
                           "does not commit its dataset")
    dataset = spec_lib.DatasetSpec(
        window=config.windows.to_json(), features=tuple(config.features),
        compression=config.compression, failures=failed, flags=dict(config.flags),
        encoder=config.encoder, run_id=run.run_id,
        files=tuple(sorted([s.file for s in shards] + list(sidecars))),
        splits={split: spec_lib.SplitInfo(
                    **counts.get(split, empty),
                    shards=tuple(spec_lib.Shard(s.file, s.examples)
                                 for s in shards if s.split == split))
                for split in config.windows.splits})
    storage.write_bytes(run.output(spec_lib.DATASET_JSON), dataset.to_json().encode("utf-8"))
    run.delete_run_folder()
    progress.counter(COMMITTED).inc()
