"""The runner a run is on, and what that decides: whether it runs on this machine, the
shuffle mode, whether --detach makes sense."""
from __future__ import annotations

import dataclasses

from beam_jobs.core.configs import JobConfig
from beam_jobs.job.errors import Refused

# Runners that run in this process or on this machine: their GroupByKey is held in memory.
LOCAL_RUNNERS = ("fnapirunner", "directrunner", "bundlebaseddirectrunner",
                 "switchingdirectrunner", "prismrunner")


def is_local(runner: str) -> bool:
    """Whether the runner (its class name, flags.runner_name) runs on this machine."""
    return runner.rsplit(".", 1)[-1].lower() in LOCAL_RUNNERS


def shuffle_mode(requested: str, runner: str) -> str:
    """--shuffle auto: spill on local runners (their GroupByKey is held in memory), group
    on any other (a distributed shuffle; per-bundle spills would be millions of files).
    `Refused` for spill on a distributed runner: each worker would spill to its own disk,
    which the shard tasks on other workers cannot read."""
    local = is_local(runner)
    if requested == "spill" and not local:
        raise Refused(f"--shuffle spill: {runner} is a distributed runner, and spill mode "
                      "writes sorted files to each worker's local disk, which other workers "
                      "cannot read; use --shuffle group (or auto)")
    if requested != "auto":
        return requested
    return "spill" if local else "group"


def for_runner(config: JobConfig, runner: str) -> JobConfig:
    """The config with what the runner decides: the shuffle mode. `Refused` for flags the
    runner cannot take."""
    if config.io.detach and is_local(runner):
        raise Refused(f"--detach: a local run ({runner}) is this process; --detach submits "
                      "a job to a distributed runner (e.g. --runner DataflowRunner) and exits")
    return dataclasses.replace(config, shards=dataclasses.replace(
        config.shards, shuffle=shuffle_mode(config.shards.shuffle, runner)))
