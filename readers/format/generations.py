"""A dataset's generations: the runs that added its windows, the first build and each
`--append` (beam_jobs/commit/append.py). A shard belongs to the generation whose run id its name
carries; dataset.json lists them (format 4 on), oldest first, and a reader checks that
each generation's count is what its shards hold."""
from __future__ import annotations

import dataclasses
from typing import Any, Mapping, Optional

from readers.format.json_checks import Bad, at, count, get, typed
from readers.format.names import RUN_ID, run_id_of
from readers.format.splits import SplitInfo


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

    def to_json(self) -> dict:
        return dataclasses.asdict(self)


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
                      get(d, "job_version", str, where, None))


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
