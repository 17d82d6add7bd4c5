"""How a local run uses the machine's cores (--all_cores): whether workers are worth
their cost, whether they can be forks of the command (forked_workers), and the options
that ask Beam for them. The flags a user gives (--direct_num_workers,
--direct_running_mode) always win."""
from __future__ import annotations

import logging
import os

from apache_beam.options.pipeline_options import DirectOptions, PipelineOptions, StandardOptions

from beam_jobs.runtime import forked_workers

_LOG = logging.getLogger(__name__)
# --all_cores in processes: with less input than this, one process is faster. Every stage
# makes a round trip to each worker, which costs more than two processes save below
# about 0.5 GB of latents (measured: docs/benchmarks.md).
ALL_CORES_MIN_BYTES = 512 * 2**20


def _given(flag: str, pipeline_args: list[str]) -> bool:
    return flag in " ".join(pipeline_args)


def worth_workers(running_mode: str, stored_bytes: float, pipeline_args: list[str]) -> bool:
    """Whether --all_cores runs workers for a source of `running_mode` and `stored_bytes`:
    threads always; processes for inputs of ALL_CORES_MIN_BYTES or more, or when
    --direct_num_workers says how many. One line says when it does not."""
    if (running_mode != "multi_processing" or stored_bytes >= ALL_CORES_MIN_BYTES
            or _given("--direct_num_workers", pipeline_args)):
        return True
    _LOG.info("--all_cores: %.0f MiB of input runs in one process, faster than worker "
              "processes below %d MiB", stored_bytes / 2**20, ALL_CORES_MIN_BYTES // 2**20)
    return False


def can_fork(pipeline_args: list[str], runner: str) -> bool:
    """Whether --all_cores's worker processes can be forks of this one: on FnApiRunner,
    unless the flags name a running mode, in a process with no other thread."""
    return (runner.rsplit(".", 1)[-1].lower() == "fnapirunner"
            and not _given("--direct_running_mode", pipeline_args)
            and forked_workers.can_fork())


def pipeline_options(pipeline_args: list[str], all_cores: bool,
                     running_mode: str) -> PipelineOptions:
    """Beam's options; FnApiRunner when no runner is named; with --all_cores one worker
    per core in `running_mode` (the source's: processes or threads; in_memory for forked
    workers), unless the flags say otherwise."""
    options = PipelineOptions(pipeline_args)
    standard, direct = options.view_as(StandardOptions), options.view_as(DirectOptions)
    if standard.runner is None:
        standard.runner = "FnApiRunner"
    if all_cores and not _given("--direct_num_workers", pipeline_args):
        direct.direct_num_workers = os.cpu_count() or 1
    if all_cores and not _given("--direct_running_mode", pipeline_args):
        direct.direct_running_mode = running_mode
    return options
