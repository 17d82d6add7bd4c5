"""Progress of a long run, on stderr at a steady pace, and the job's Beam metrics.

FnApiRunner shows nothing while it runs and its metrics are readable only afterwards,
so each worker process writes its own share every `interval` seconds. The lines go to
the process's stderr itself, not through `logging`: a worker process of
`--direct_running_mode multi_processing` sends its log records to the runner, which
prints only warnings, but it shares the command's stderr (on Dataflow, stderr is in the
worker logs). Beam counters carry the same figures, so Dataflow's monitoring shows them.
"""
from __future__ import annotations

import datetime
import os
import sys
import time
from typing import Optional

import apache_beam as beam

NAMESPACE = "make_shards"


def counter(name: str) -> beam.metrics.metric.Metrics.DelegatingCounter:
    return beam.metrics.Metrics.counter(NAMESPACE, name)


def distribution(name: str) -> beam.metrics.metric.Metrics.DelegatingDistribution:
    return beam.metrics.Metrics.distribution(NAMESPACE, name)


def duration(seconds: float) -> str:
    """Seconds as a person reads them: 4.2 s, or 0:12:07."""
    if seconds < 60:
        return f"{seconds:.1f} s"
    return str(datetime.timedelta(seconds=int(seconds)))


class Progress:
    """One worker's running totals, logged at most once per `interval` seconds.

    `total_videos` (when known) and `workers` give the ETA, assuming the workers share
    the videos evenly.
    """

    def __init__(self, total_videos: Optional[int], workers: int = 1, interval: float = 10.0):
        self._total, self._workers, self._interval = total_videos, max(1, workers), interval
        self._start: Optional[float] = None
        self._last = 0.0
        self._unlogged = False
        self.videos = self.frames = self.windows = self.failures = 0

    def start(self) -> None:
        """Start the clock, if not yet: call as the first video begins."""
        if self._start is None:
            self._start = self._last = time.monotonic()

    def add(self, videos: int = 0, frames: int = 0, windows: int = 0,
            failures: int = 0) -> None:
        self.videos += videos
        self.frames += frames
        self.windows += windows
        self.failures += failures
        self._unlogged = True
        now = time.monotonic()
        if now - self._last >= self._interval:
            self.log(now)

    def log(self, now: Optional[float] = None) -> None:
        """Log the totals now (at the end of a bundle: what the last interval missed)."""
        if self._start is not None and self._unlogged:
            self._last = now or time.monotonic()
            self._unlogged = False
            print(f"INFO beam_jobs.progress: {self.line(self._last)}", file=sys.stderr,
                  flush=True)

    def line(self, now: float) -> str:
        start = now if self._start is None else self._start   # no video yet: none elapsed
        elapsed = max(now - start, 1e-9)
        done = self.videos + self.failures
        text = f"worker {os.getpid()}: {done}"
        if self._total:
            share = self._total / self._workers
            text += f" of ~{share:.0f} videos"
            eta = (share - done) * elapsed / done if done else None
        else:
            text += " video" + "s" * (done != 1)
            eta = None
        text += (f", {self.frames / elapsed:,.0f} frames/s on this worker, "
                 f"{self.windows:,} windows, {self.failures} failures, "
                 f"elapsed {duration(elapsed)}")
        if eta is not None:
            text += f", ETA {duration(max(0.0, eta))}"
        return text
