"""Whether a finished run commits its dataset: a pure decision from its counts, the
failure threshold and whether it appends, with the one line that says why not.

The pipeline's last step acts on it; the launcher, which learns the counts from the
run's metrics, asks it again for the line to print.
"""
from __future__ import annotations

from typing import NamedTuple

COMMIT = "commit"
NOTHING_NEW = "nothing new"              # an append whose every video the dataset has
TOO_MANY_FAILURES = "too many failures"  # over --max_failure_fraction
NO_WINDOW = "no window"                  # nothing to commit: every video too short, or none read
IDS_TWICE = "ids twice"                  # videos.jsonl would list a video twice
OUTCOMES = (COMMIT, NOTHING_NEW, TOO_MANY_FAILURES, NO_WINDOW, IDS_TWICE)


class Counts(NamedTuple):
    """What a decision needs of a run's counts."""
    good: int      # videos that gave no failure (with windows, or too short for one)
    failed: int    # failed input records or videos
    windows: int   # the good videos' windows
    longest: int   # the longest good video's frames
    twice: int = 0  # the video ids the new videos.jsonl would list more than once


class Decision(NamedTuple):
    outcome: str   # one of OUTCOMES
    reason: str    # why not COMMIT, in one line; "" for COMMIT

    @property
    def commits(self) -> bool:
        return self.outcome == COMMIT


def decide(counts: Counts, max_failure_fraction: float, window: int,
           appending: bool) -> Decision:
    """The outcome of a run with `counts`. An append commits the new videos even when
    none has a window (too short: their ids are then known); an append with no new video
    at all commits nothing and is no error."""
    good, failed = counts.good, counts.failed
    if counts.twice:   # never committed: a dataset that fails --verify
        return Decision(IDS_TWICE, f"{counts.twice} video id{'s' * (counts.twice > 1)} "
                                   "would be listed twice in the videos file, which a "
                                   "dataset never does")
    if appending and not good and not failed:
        return Decision(NOTHING_NEW, "every input video is in the dataset already")
    if failed and failed / (failed + good) > max_failure_fraction:
        return Decision(TOO_MANY_FAILURES, f"{failed} of {failed + good} videos failed "
                        f"({failed / (failed + good):.1%}), more than "
                        f"--max_failure_fraction {max_failure_fraction}")
    if not appending and not counts.windows:
        if not good:
            return Decision(NO_WINDOW, f"no window to commit: no video was read ({failed} "
                                       "failed)")
        return Decision(NO_WINDOW, f"no window to commit: every video is shorter than "
                                   f"--window {window} (the longest has {counts.longest} "
                                   "frames)")
    return Decision(COMMIT, "")
