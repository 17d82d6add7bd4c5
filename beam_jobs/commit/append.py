"""`--append`: a run that adds to a committed dataset only the videos it does not have.

A dataset grows by generations. Each run that adds windows writes shards of its own (its
run id in their names), shuffled among themselves, and never touches the shards before
them; dataset.json lists the shards of every generation under their split, so every
reader reads the union with no change. An append therefore costs what its new videos
cost, plus reading the input's ids: a video whose id the dataset's videos.jsonl lists
is skipped and counted, never decoded: the input's ids meet the dataset's in a join
(sources/base.py's `JoinKnown`; the latent reader reads of each record only its id, then
seeks past the known ones, sources/latents.py).

Readers cannot tell generations apart, so they must be one dataset: the flags that
decide what a window holds (all but `FREE_FLAGS`), the input's kind and the features
the inputs give must be the dataset's, or the run is refused before any work (`check`,
which raises `AppendError`).
A video's split is the hash of (seed, id), as in a full build, so an appended video lands
in the split a rebuild would give it. What a rebuild does differently: one shuffle over
every window, and one generation.
"""
from __future__ import annotations

import json
from typing import Any, Mapping, NamedTuple, Optional, Sequence

import apache_beam as beam

from beam_jobs.commit.dataset import DatasetConfig
from beam_jobs.core import paths
from readers import format as data_format

# Flags that decide how the job runs or how windows are cut into shards, not what a
# window holds: an append may give other values.
FREE_FLAGS = frozenset({
    "input", "output_dir", "overwrite", "append", "retry_failed", "detach", "break_lease",
    "all_cores", "homepage",
    "progress_interval", "num_shards", "shard_size_mb", "max_failure_fraction", "shuffle",
    "shuffle_bucket_mb", "spill_buffer_mb", "encoder_device", "encoder_batch_size"})
# Flags that change no window without another flag: compared only where that one is set
# (a dataset without --frame_size resizes nothing, whatever its --resize).
MOOT_WITHOUT = {"resize": "frame_size"}
APPENDABLE_SINCE = 3   # before 3 an index is binary, after it text: one dataset has one


class AppendError(ValueError):
    """This run may not add to the committed dataset: a flag, the inputs or the dataset
    itself (its version, its videos file) differ from what an append needs. The message
    is one line that names what is at fault."""

class Known(NamedTuple):
    """What an append knows of the committed dataset it adds to."""
    spec: data_format.DatasetSpec
    videos: beam.PCollection        # the rows of its videos.jsonl
    bad_frames: beam.PCollection    # the rows of its bad_frames.jsonl
    failures: beam.PCollection      # the rows of its failures.jsonl
    ids: beam.PCollection           # the ids to skip: its videos', and its failures'
                                    # unless --retry_failed (any id any number of times)
    digests: beam.PCollection       # (frame digest, video id) of its videos that have one


def read_known(pipeline: beam.Pipeline, output_dir: str, spec: data_format.DatasetSpec,
               retry_failed: bool = False) -> Known:
    """The committed dataset's rows and ids, read by the pipeline (a distributed runner's
    workers read them, not the launcher)."""
    def rows(kind: str) -> beam.PCollection:
        name = spec.sidecars.get(kind)
        if name is None:
            return pipeline | f"No{kind}" >> beam.Create([])
        return (pipeline | f"Read{kind}" >> beam.io.ReadFromText(paths.join(output_dir, name))
                | f"Parse{kind}" >> beam.Map(json.loads))

    videos, failures = rows("videos"), rows("failures")
    ids = [videos | "KnownIds" >> beam.Map(lambda row: row["video_id"])]
    if not retry_failed:
        ids.append(failures | "FailedIds" >> beam.FlatMap(
            lambda row: [row["video_id"]] if row.get("video_id") else []))
    known_ids = ids | "AllKnownIds" >> beam.Flatten()
    digests = videos | "KnownDigests" >> beam.FlatMap(
        lambda row: [(row["digest"], row["video_id"])] if row.get("digest") else [])
    return Known(spec, videos, rows("bad_frames"), failures, known_ids, digests)


def _shown(value: Any) -> str:
    return json.dumps(value)


def check(spec: data_format.DatasetSpec, output_dir: str, run: DatasetConfig,
          defaults: dict) -> None:
    """AppendError when this run may not add to `spec`'s dataset, in one line naming the
    flag at fault. `run`: what this run's dataset.json would say (its flags, and what
    its inputs give: the input's kind, features, encoder and labels); `defaults`: every
    flag's default, what a dataset written before a flag existed was made with."""
    where = f"the dataset in {output_dir}"
    flags, input_kind, encoder, labels = run.flags, run.input_kind, run.encoder, run.labels
    if spec.format_version < APPENDABLE_SINCE:
        raise AppendError(f"--append: {where} has format version {spec.format_version}, "
                          "written by an older job; rebuild it with --overwrite")
    if spec.input_kind and input_kind != spec.input_kind:
        raise AppendError(f"--append: --input holds {input_kind} here, {where} was made "
                          f"from {spec.input_kind}")
    _check_flags(flags, spec.flags, defaults, where)
    _check_features(run.features, spec.features, where)
    if (labels or None) != (spec.labels or None):
        raise AppendError(f"--append: the inputs' labels are {_shown(labels)}, {where}'s "
                          f"{_shown(spec.labels)}")
    if _model(encoder) != _model(spec.encoder):
        raise AppendError(f"--append: the --encoder model is not the one that made {where} "
                          "(its checksum or shapes differ)")


def _check_flags(flags: Mapping[str, Any], theirs_flags: Mapping[str, Any], defaults: dict,
                 where: str) -> None:
    """AppendError naming the first flag, by name, that this run sets otherwise than
    the dataset was made with (a flag it lacks: its default), but those free to differ
    and those moot for both."""
    for name in sorted(set(flags) | set(theirs_flags)):
        if name in FREE_FLAGS or _moot(name, flags, theirs_flags):
            continue
        mine, theirs = flags.get(name), theirs_flags.get(name, defaults.get(name))
        if mine != theirs:
            raise AppendError(f"--append: --{name} {_shown(mine)} here, {_shown(theirs)} in "
                              f"{where}; an append must make the windows its first run "
                              "made (or rebuild with --overwrite)")


def _check_features(features: Sequence[data_format.FeatureSpec],
                    theirs_features: Sequence[data_format.FeatureSpec], where: str) -> None:
    """AppendError naming the first feature that the inputs give otherwise than the
    dataset holds it (or one only either has)."""
    mine = [f.to_json() for f in features]
    theirs = [f.to_json() for f in theirs_features]
    if mine != theirs:
        mine_by, theirs_by = {f["name"]: f for f in mine}, {f["name"]: f for f in theirs}
        name = next(n for n in [*mine_by, *theirs_by] if mine_by.get(n) != theirs_by.get(n))
        raise AppendError(f"--append: the inputs' {name!r} is {_feature(mine_by.get(name))}, "
                          f"{where}'s is {_feature(theirs_by.get(name))}")


def _moot(name: str, mine: Mapping[str, Any], theirs: Mapping[str, Any]) -> bool:
    """Whether flag `name` changes no window of either run (`MOOT_WITHOUT`)."""
    needs = MOOT_WITHOUT.get(name)
    return needs is not None and mine.get(needs) is None and theirs.get(needs) is None


def _feature(row: Optional[dict]) -> str:
    return "absent" if row is None else f"{row['dtype']} {row['shape']} ({row['encoding']})"


def _model(encoder: Optional[Mapping[str, Any]]) -> Optional[dict]:
    """What of an encoder's record decides its latents: all but where it ran."""
    return None if encoder is None else {k: v for k, v in encoder.items()
                                         if k not in ("devices_used", "device_requested",
                                                      "batch_size")}
