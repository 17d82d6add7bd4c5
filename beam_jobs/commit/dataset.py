"""The dataset.json a run commits: built (readers.format.dataset_json) from the run's
counts, its written shards and what the job was asked, and (`--append`) added to the
committed one."""
from __future__ import annotations

import dataclasses
from typing import Any, Mapping, Optional, Sequence

from beam_jobs import __version__
from beam_jobs.commit.tally import Tally, empty_counts
from readers import format as data_format
from readers.format import dataset_json
from readers.format.windows import Window


@dataclasses.dataclass(frozen=True)
class DatasetConfig:
    """What dataset.json says besides the counts, and when the run fails instead."""
    features: tuple[data_format.FeatureSpec, ...]
    windows: Window
    splits: tuple[str, ...]
    compression: str
    max_failure_fraction: float
    flags: Mapping[str, Any] = dataclasses.field(default_factory=dict)
    encoder: Optional[Mapping[str, Any]] = None
    input_kind: Optional[str] = None
    frame: Mapping[str, Any] = dataclasses.field(default_factory=dict)
    labels: Optional[Mapping[str, Any]] = None


def build_spec(config: DatasetConfig, run_id: str, tally: Tally, sidecars: Sequence[str],
               base: Optional[data_format.DatasetSpec] = None,
               stats: Optional[Mapping[str, Mapping[str, data_format.ChannelStats]]] = None
               ) -> data_format.DatasetSpec:
    """The dataset.json of run `run_id` (readers.format.dataset_json): one generation of
    the tally's shards, with its counts, `sidecars` and `stats`; with `base`, that
    dataset with this generation added. RuntimeError when the shards do not hold the
    windows cut."""
    splits = {split: data_format.SplitInfo(
                  **tally.counts.get(split, empty_counts()),
                  shards=tuple(s for of, s in tally.shards if of == split))
              for split in config.splits}
    _check_windows_in_shards(splits)
    dataset = dataset_json.run_dataset(
        window=config.windows, features=config.features,
        compression=config.compression, splits=splits,
        generation=data_format.Generation(
            run_id, tally.total("videos"), tally.total("windows"),
            tally.total("skipped_short"), tally.failed, tally.skipped, __version__,
            data_format.FORMAT_VERSION),
        sidecars=sidecars, stats=stats or {},
        failures=tally.failed + tally.remembered, flags=dict(config.flags),
        job_version=__version__, input_kind=config.input_kind, frame=config.frame,
        labels=config.labels,
        encoder=config.encoder and {**config.encoder, "devices_used": tally.devices})
    return dataset if base is None else dataset_json.extend(base, dataset)


def _check_windows_in_shards(splits: Mapping[str, data_format.SplitInfo]) -> None:
    """RuntimeError when a split's shards do not hold as many examples as windows were
    cut for it."""
    for split, info in splits.items():
        in_shards = sum(s.examples for s in info.shards)
        if in_shards != info.windows:
            raise RuntimeError(f"split {split}: {in_shards} examples in the shards, "
                               f"{info.windows} windows cut")
