"""The dataset.json a run commits: its spec built from the run's counts, its written
shards and what the job was asked, and (`--append`) added to the committed one."""
from __future__ import annotations

import dataclasses
from typing import Any, Mapping, Optional, Sequence

from beam_jobs import __version__
from beam_jobs.commit.tally import Tally, empty_counts
from beam_jobs.core.configs import WindowConfig
from beam_jobs.core.records import SplitShard
from readers import format as data_format
from readers.format import tfds_info
from readers.format.channel_stats import empty_stats, merge_stats


@dataclasses.dataclass(frozen=True)
class DatasetConfig:
    """What dataset.json says besides the counts, and when the run fails instead."""
    features: tuple[data_format.FeatureSpec, ...]
    windows: WindowConfig
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
    """The dataset.json of run `run_id`: one generation of the tally's shards, with its
    counts and `stats`, its frames' statistics ({split: {feature: ChannelStats}}; every
    split's, of no frame where it has none), listing every file of the dataset (the
    shards, their indexes and window tables, `sidecars` and the TFDS files); with
    `base`, that dataset with this generation added. RuntimeError
    when the shards do not hold the windows cut."""
    shards = tally.shards
    counts = {split: tally.counts.get(split, empty_counts()) for split in config.splits}
    _check_windows_in_shards(counts, shards)
    dataset = data_format.DatasetSpec(
        window=config.windows.to_json(), features=tuple(config.features),
        compression=config.compression, failures=tally.failed + tally.remembered,
        flags=dict(config.flags),
        run_id=run_id, generations=(data_format.Generation(
            run_id, tally.total("videos"), tally.total("windows"),
            tally.total("skipped_short"), tally.failed, tally.skipped, __version__,
            data_format.FORMAT_VERSION),),
        files=_files(shards, sidecars, config.compression),
        job_version=__version__, input_kind=config.input_kind, frame=config.frame,
        labels=config.labels, encoder=config.encoder and {
            **config.encoder, "devices_used": tally.devices},
        sidecars=_sidecars_by_kind(sidecars, run_id),
        splits=_splits(counts, shards),
        stats={split: {**empty_stats(config.features), **(stats or {}).get(split, {})}
               for split in config.splits})
    return dataset if base is None else extend(base, dataset)


def _check_windows_in_shards(counts: Mapping[str, Mapping[str, int]],
                             shards: Sequence[SplitShard]) -> None:
    """RuntimeError when a split's shards do not hold as many examples as windows were
    cut for it (`counts`, per split in order)."""
    for split in counts:
        in_shards = sum(s.examples for of, s in shards if of == split)
        if in_shards != counts[split]["windows"]:
            raise RuntimeError(f"split {split}: {in_shards} examples in the shards, "
                               f"{counts[split]['windows']} windows cut")


def _files(shards: Sequence[SplitShard], sidecars: Sequence[str], compression: str
           ) -> tuple[str, ...]:
    """Every file of a run, sorted: its shards, their indexes and window tables, its
    side files and the TFDS files."""
    return tuple(sorted([name for _, s in shards for name in (s.file, s.index, s.table)
                         if name] + list(sidecars) + list(tfds_info.file_names(compression))))


def _sidecars_by_kind(sidecars: Sequence[str], run_id: str) -> dict[str, str]:
    """Kind -> file of the side files of `sidecars` that are run `run_id`'s."""
    return {kind: name for kind in data_format.SIDECAR_KINDS for name in sidecars
            if name == data_format.sidecar_name(kind, run_id)}


def _splits(counts: Mapping[str, Mapping[str, int]], shards: Sequence[SplitShard]
            ) -> dict[str, data_format.SplitInfo]:
    """Per split (`counts`' keys, in order), its counts and its shards."""
    return {split: data_format.SplitInfo(
                **counts[split], shards=tuple(s for of, s in shards if of == split))
            for split in counts}


def extend(base: data_format.DatasetSpec, new: data_format.DatasetSpec
           ) -> data_format.DatasetSpec:
    """`base` with `new` (one generation, this run's) added: per split the counts summed
    and the new shards after the old; every file of both but the base's sidecars and
    TFDS files, which the new ones replace; the generations in order; the statistics
    merged, or none where `base` has none (its frames' are not known: statistics of the
    new frames alone would pass for the dataset's). The rest (flags, failures: those of
    failures.jsonl) is the new run's."""
    splits = {}
    for name in new.splits:
        old, added = base.splits[name], new.splits[name]
        splits[name] = data_format.SplitInfo(
            old.videos + added.videos, old.windows + added.windows,
            old.skipped_short + added.skipped_short, old.shards + added.shards,
            old.bad_frames + added.bad_frames, old.frames + added.frames)
    encoder = new.encoder and {**new.encoder, "devices_used": sorted(
        {*new.encoder.get("devices_used", []), *(base.encoder or {}).get("devices_used", [])})}
    return data_format.DatasetSpec(
        window=new.window, features=new.features, compression=new.compression,
        splits=splits, failures=new.failures, flags=new.flags, encoder=encoder,
        run_id=new.run_id, files=tuple(sorted(
            {*base.files, *new.files} - {*base.sidecars.values(), *data_format.TFDS_FILES}
            | set(new.files))),
        job_version=new.job_version, input_kind=new.input_kind, frame=new.frame,
        labels=new.labels, generations=(*base.generations, *new.generations),
        sidecars=new.sidecars, stats=merge_stats(base.stats, new.stats) if base.stats else {})
