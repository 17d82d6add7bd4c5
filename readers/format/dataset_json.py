"""dataset.json built: a run's from its splits, and an `--append`'s added to the
committed one. The job's commit (beam_jobs/commit/dataset.py) and a plain writer
(tests/format_datasets.py) build it here alike."""
from __future__ import annotations

from typing import Any, Mapping, Sequence

from readers.format import tfds_info
from readers.format.channel_stats import ChannelStats, empty_stats, merge_stats
from readers.format.features import FeatureSpec
from readers.format.generations import Generation
from readers.format.names import SIDECAR_KINDS, TFDS_FILES, sidecar_name
from readers.format.spec import DatasetSpec
from readers.format.splits import SplitInfo
from readers.format.windows import Window


def run_dataset(*, window: Window, features: Sequence[FeatureSpec],
                compression: str, splits: Mapping[str, SplitInfo], generation: Generation,
                sidecars: Sequence[str],
                stats: Mapping[str, Mapping[str, ChannelStats]], **described: Any
                ) -> DatasetSpec:
    """The dataset.json of one run (`generation`'s): its `splits`, in order, listing
    every file of it (the shards, their indexes and window tables, `sidecars` and the
    TFDS files) and `stats`, its frames' statistics ({split: {feature: ChannelStats}};
    every split's, of no frame where it has none). `described`: the rest of
    DatasetSpec's fields (flags, failures, job_version, input_kind, frame, labels,
    encoder)."""
    run_id = generation.run_id
    if not run_id:   # only a generation read from a dataset of format 6 or before lacks one
        raise ValueError("a run's generation must have its run id")
    files = [name for split in splits.values() for shard in split.shards
             for name in (shard.file, shard.index, shard.table) if name]
    return DatasetSpec(
        window=window, features=tuple(features), compression=compression, splits=splits,
        run_id=run_id, generations=(generation,),
        files=tuple(sorted(files + list(sidecars) + list(tfds_info.file_names(compression)))),
        sidecars={kind: name for kind in SIDECAR_KINDS for name in sidecars
                  if name == sidecar_name(kind, run_id)},
        stats={split: {**empty_stats(features), **stats.get(split, {})} for split in splits},
        **described)


def extend(base: DatasetSpec, new: DatasetSpec) -> DatasetSpec:
    """`base` with `new` (one generation, this run's) added: per split the counts summed
    and the new shards after the old; every file of both but the base's sidecars and
    TFDS files, which the new ones replace; the generations in order; the statistics
    merged, or none where `base` has none (its frames' are not known: statistics of the
    new frames alone would pass for the dataset's). The rest (flags, failures: those of
    failures.jsonl) is the new run's."""
    splits = {}
    for name in new.splits:
        old, added = base.splits[name], new.splits[name]
        splits[name] = SplitInfo(
            old.videos + added.videos, old.windows + added.windows,
            old.skipped_short + added.skipped_short, old.shards + added.shards,
            old.bad_frames + added.bad_frames, old.frames + added.frames)
    encoder = new.encoder and {**new.encoder, "devices_used": sorted(
        {*new.encoder.get("devices_used", []), *(base.encoder or {}).get("devices_used", [])})}
    return DatasetSpec(
        window=new.window, features=new.features, compression=new.compression,
        splits=splits, failures=new.failures, flags=new.flags, encoder=encoder,
        run_id=new.run_id, files=tuple(sorted(
            {*base.files, *new.files} - {*base.sidecars.values(), *TFDS_FILES}
            | set(new.files))),
        job_version=new.job_version, input_kind=new.input_kind, frame=new.frame,
        labels=new.labels, generations=(*base.generations, *new.generations),
        sidecars=new.sidecars, stats=merge_stats(base.stats, new.stats) if base.stats else {})
