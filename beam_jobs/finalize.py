"""The job's last step: failures.jsonl, the failure threshold, then dataset.json."""
from __future__ import annotations

import json
from typing import Iterable, Mapping, Optional

import apache_beam as beam
from apache_beam.io.filesystems import FileSystems

from beam_jobs import progress
from beam_jobs.examples import VideoCount
from beam_jobs.output_dir import delete_tree
from beam_jobs.shard_writer import WrittenShard
from readers import spec as spec_lib

COMMITTED = "datasets_committed"


class CountVideos(beam.CombineFn):
    """VideoCount rows -> {split: {"videos", "windows", "skipped_short", "frames",
    "bad_frames"}}."""

    def create_accumulator(self):
        return {}

    def add_input(self, acc, count: VideoCount):
        row = acc.setdefault(count.split, _empty_counts())
        row["videos" if count.windows else "skipped_short"] += 1
        row["windows"] += count.windows
        row["bad_frames"] += count.bad_frames
        row["frames"] += count.frames
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


def _empty_counts() -> dict:
    return {"videos": 0, "windows": 0, "skipped_short": 0, "frames": 0, "bad_frames": 0}


def _write_jsonl(path: str, rows: list[dict]) -> None:
    _write_text(path, "".join(json.dumps(row, sort_keys=True) + "\n" for row in rows))


def _write_text(path: str, text: str) -> None:
    with FileSystems.create(path) as f:
        f.write(text.encode("utf-8"))


def finalize(written: list[WrittenShard], counts: Mapping[str, Mapping[str, int]],
             failures: list[dict], bad_frames: list[dict], *, output_dir: str, temp_dir: str,
             features: Iterable[spec_lib.FeatureSpec], window: Mapping, compression: str,
             splits: Iterable[str], flags: Mapping, max_failure_fraction: float,
             encoder: Optional[Mapping] = None) -> None:
    """Write failures.jsonl and bad_frames.jsonl, then dataset.json when the failure
    fraction allows it.

    Over the threshold, the shards are removed again: a directory without dataset.json
    holds no dataset, whatever else lies in it.
    """
    failures = sorted(failures, key=lambda f: (f["source"], f["record_index"] or 0,
                                               f["video_id"] or ""))
    _write_jsonl(FileSystems.join(output_dir, spec_lib.FAILURES_JSONL), failures)
    if bad_frames:
        _write_jsonl(FileSystems.join(output_dir, spec_lib.BAD_FRAMES_JSONL),
                     sorted(bad_frames, key=lambda row: row["video_id"]))
    good = sum(row["videos"] + row["skipped_short"] for row in counts.values())
    progress.counter("videos_ok").inc(good)
    progress.counter("videos_failed").inc(len(failures))
    shards = sorted(written)
    if failures and len(failures) / (len(failures) + good) > max_failure_fraction:
        if shards:
            FileSystems.delete([FileSystems.join(output_dir, s.file) for s in shards])
        delete_tree(temp_dir)
        return
    empty = _empty_counts()
    for split in splits:
        in_shards = sum(s.examples for s in shards if s.split == split)
        if in_shards != counts.get(split, empty)["windows"]:
            raise RuntimeError(f"split {split}: {in_shards} examples in the shards, "
                               f"{counts.get(split, empty)['windows']} windows cut")
    dataset = spec_lib.DatasetSpec(
        window=dict(window), features=tuple(features), compression=compression,
        failures=len(failures), flags=dict(flags), encoder=encoder,
        splits={split: spec_lib.SplitInfo(
                    **counts.get(split, empty),
                    shards=tuple(spec_lib.Shard(s.file, s.examples)
                                 for s in shards if s.split == split))
                for split in splits})
    temp_json = FileSystems.join(temp_dir, spec_lib.DATASET_JSON)
    _write_text(temp_json, dataset.to_json())
    FileSystems.rename([temp_json], [FileSystems.join(output_dir, spec_lib.DATASET_JSON)])
    delete_tree(temp_dir)
    progress.counter(COMMITTED).inc()
