"""A dataset's generations: the runs that added its windows, the first build and each
`--append` (beam_jobs/commit/append.py). A shard belongs to the generation whose run id its name
carries; dataset.json lists them (format 4 on), oldest first, and a reader checks that
each generation's count is what its shards hold."""
from __future__ import annotations

import dataclasses
from typing import Any, Mapping, Optional

from readers.format.json_checks import Bad, at, count, get, typed
from readers.format.names import RUN_ID, run_id_of
from readers.format.splits import Shard, SplitInfo


@dataclasses.dataclass(frozen=True)
class Generation:
    """The windows one run added (the first run, or an `--append`): its shards are the
    ones whose names end with its run id. Counts are over all splits."""
    run_id: Optional[str]
    videos: int
    windows: int
    skipped_short: int = 0
    failures: int = 0
    skipped_existing: int = 0     # input videos whose ids the dataset already had
    job_version: Optional[str] = None
    # The format its run wrote (format 7 on; None: an older run, of format 6 or before):
    # what files each of its shards must have (`owed_by`).
    format_version: Optional[int] = None

    def to_json(self) -> dict:
        d = dataclasses.asdict(self)
        if self.format_version is None:
            del d["format_version"]
        return d


def generations_of(splits: Mapping[str, SplitInfo], run_id: Optional[str], failures: int = 0,
                   job_version: Optional[str] = None) -> tuple[Generation, ...]:
    """The one generation of a dataset written by one run: all its counts."""
    return (Generation(run_id, sum(s.videos for s in splits.values()),
                       sum(s.windows for s in splits.values()),
                       sum(s.skipped_short for s in splits.values()), failures,
                       job_version=job_version),)


def parse_generation(d: Any, where: str) -> Generation:
    typed(d, dict, where)
    run_id = get(d, "run_id", str, where)
    if not RUN_ID.fullmatch(run_id):
        raise Bad(f"{at(where, 'run_id')}: {run_id!r} is not a run id (12 hex digits)")
    return Generation(run_id, count(d, "videos", where), count(d, "windows", where),
                      count(d, "skipped_short", where, 0), count(d, "failures", where, 0),
                      count(d, "skipped_existing", where, 0),
                      get(d, "job_version", str, where, None),
                      count(d, "format_version", where, None, least=1))


def check_generations(generations: Optional[tuple[Generation, ...]], run_id: Optional[str]
                       ) -> tuple[Optional[str], ...]:
    """The run ids a shard's name may end with: the generations', each once, the last
    the run that wrote dataset.json (before version 4: that run's alone)."""
    if generations is None:
        return (run_id,)
    if not generations:
        raise Bad("generations: empty; a dataset has at least the run that wrote it")
    ids = [g.run_id for g in generations]
    if len(set(ids)) < len(ids):
        raise Bad(f"generations: run {next(i for i in ids if ids.count(i) > 1)} is listed "
                   "twice")
    if ids[-1] != run_id:
        raise Bad(f"generations: the last is run {ids[-1]}, not run {run_id}, the run "
                   "dataset.json names")
    return tuple(ids)


def check_generation_counts(generations: tuple[Generation, ...],
                             splits: Mapping[str, SplitInfo]) -> None:
    """Each generation's windows are those of the shards named with its run id."""
    held = dict.fromkeys((g.run_id for g in generations), 0)
    for split in splits.values():
        for shard in split.shards:
            held[run_id_of(shard.file)] = held.get(run_id_of(shard.file), 0) + shard.examples
    for i, g in enumerate(generations):
        if held[g.run_id] != g.windows:
            raise Bad(f"generations[{i}]: {g.windows} windows, the shards of run "
                       f"{g.run_id} hold {held[g.run_id]}")


def check_tables_owed(generations: tuple[Generation, ...], splits: Mapping[str, SplitInfo],
                      run_id: Optional[str], format_version: int) -> None:
    """Bad for a shard without a file its run wrote for each of its shards: a window
    table (format 6 on) and the table's CRC (format 7 on), by the format its generation
    records, or dataset.json's own for the run that wrote it. An older generation's
    format is not known: its shards all have a table, or none do (and the same for the
    CRC)."""
    known = {g.run_id: g.format_version for g in generations if g.format_version}
    known[run_id] = format_version
    runs: dict[Optional[str], list[tuple[str, Shard]]] = {}
    for name, split in splits.items():
        for i, shard in enumerate(split.shards):
            runs.setdefault(run_id_of(shard.file), []).append(
                (f"splits.{name}.shards[{i}]", shard))
    for run, shards in runs.items():
        version = known.get(run)
        if version is None:
            _check_alike(run, shards)
            continue
        for where, shard in shards:
            lacks = ("window table" if version >= 6 and shard.table is None else
                     "table_crc32c" if version >= 7 and shard.table_crc32c is None else None)
            if lacks:
                raise Bad(f"{where}: shard {shard.file} has no {lacks}, which its run "
                          f"{run} (format {version}) wrote for each of its shards: "
                          "dataset.json is damaged")


def _check_alike(run: Optional[str], shards: list[tuple[str, Shard]]) -> None:
    """Bad when some of a run's shards have a window table (or its CRC) and some not."""
    for what, of in (("window table", lambda shard: shard.table is not None),
                     ("table_crc32c", lambda shard: shard.table_crc32c is not None)):
        with_it = [shard.file for _, shard in shards if of(shard)]
        without = [(where, shard.file) for where, shard in shards if not of(shard)]
        if with_it and without:
            raise Bad(f"{without[0][0]}: shard {without[0][1]} has no {what}, where shard "
                      f"{with_it[0]} of its run {run} has one: dataset.json is damaged")
