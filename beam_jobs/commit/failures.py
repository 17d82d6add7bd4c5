"""Failures across generations: an --append keeps the failure rows of the dataset it adds
to, so a video that failed once is remembered, not retried every day, and never counted
against a later run's --max_failure_fraction.

A failure is known by its video id, or, for a row without one (a record whose id could
not be read, the rest of a broken file), by its file and record index. The ids of
remembered failures are skipped unread like the dataset's videos (commit/append.py),
unless --retry_failed; a failure this run makes again (a row without an id is found only
by reading its file again) is the remembered one. A remembered failure whose video this
run read without failure (--retry_failed) is dropped: it is in videos.jsonl now.
"""
from __future__ import annotations

from typing import NamedTuple

import apache_beam as beam

from beam_jobs.commit.tally import FAILED, REMEMBERED

_TALLY = "tally"


def identity(row: dict) -> tuple:
    """What a failure row is a failure of."""
    if row["video_id"]:
        return ("id", row["video_id"])
    return ("at", row["source"], -1 if row["record_index"] is None else row["record_index"])


class Merged(NamedTuple):
    rows: beam.PCollection    # the rows of the new failures file
    tally: beam.PCollection   # (FAILED, records) of this run's own, (REMEMBERED, records)


def _merge(element):
    _, groups = element
    old, new = list(groups["old"]), list(groups["new"])
    if old and not (groups["good"] and not new):   # remembered, or made again
        for row in old:
            yield row
            yield beam.pvalue.TaggedOutput(_TALLY, (REMEMBERED, row.get("records", 1)))
    elif new and not old:
        for row in new:
            yield row
            yield beam.pvalue.TaggedOutput(_TALLY, (FAILED, row.get("records", 1)))


class MergeFailures(beam.PTransform):
    """(this run's failure rows, the dataset's failure rows, ids of this run's videos
    that gave no failure) -> `Merged`."""

    @beam.typehints.no_annotations   # a tuple of PCollections: mypy's, not Beam's
    def expand(self, inputs) -> Merged:
        new, old, good = inputs
        merged = (
            {"new": new | "KeyNew" >> beam.Map(lambda row: (identity(row), row)),
             "old": old | "KeyOld" >> beam.Map(lambda row: (identity(row), row)),
             "good": good | "KeyGood" >> beam.Map(lambda video_id: (("id", video_id), True))}
            | "GroupByVideo" >> beam.CoGroupByKey()
            | "Merge" >> beam.FlatMap(_merge).with_outputs(_TALLY, main="rows"))
        return Merged(merged.rows, merged[_TALLY])
