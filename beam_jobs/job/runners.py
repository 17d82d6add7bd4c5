"""The runner a run is on, and what that decides: whether it runs on this machine, the
shuffle mode, whether --detach makes sense."""
from __future__ import annotations

import dataclasses
import logging
from typing import Optional

from apache_beam.options.pipeline_options import (
    PipelineOptions,
    PortableOptions,
    SetupOptions,
    TestOptions,
    WorkerOptions,
)
from apache_beam.options.pipeline_options_validator import PipelineOptionsValidator
from apache_beam.runners.runner import create_runner

from beam_jobs.core import paths
from beam_jobs.core.configs import JobConfig
from beam_jobs.job.errors import Refused

# Runners that run in this process or on this machine: their GroupByKey is held in memory.
LOCAL_RUNNERS = ("fnapirunner", "directrunner", "bundlebaseddirectrunner",
                 "switchingdirectrunner", "prismrunner")


def is_local(runner: str) -> bool:
    """Whether the runner (its class name, command_line.runner_name) runs on this machine."""
    return runner.rsplit(".", 1)[-1].lower() in LOCAL_RUNNERS


def shuffle_mode(runner: str, config: JobConfig) -> str:
    """The shuffle this run takes, its --shuffle resolved. auto: on local runners, place
    where it can write (`cannot_place`), else spill (their GroupByKey is held in
    memory); group on any other (a distributed shuffle; per-bundle spills would be
    millions of files). `Refused` for spill or place on a distributed runner (each
    worker would spill to its own disk, which the shard tasks on other workers cannot
    read), and for place where it cannot write."""
    requested, local = config.shards.shuffle, is_local(runner)
    if requested in ("spill", "place") and not local:
        raise Refused(f"--shuffle {requested}: {runner} is a distributed runner, and "
                      f"{requested} mode writes files on each worker's local disk, which "
                      "other workers cannot read; use --shuffle group (or auto)")
    why_not = cannot_place(config)
    if requested == "place" and why_not:
        raise Refused(f"--shuffle place: {why_not}; use --shuffle spill (or auto)")
    if requested != "auto":
        return requested
    return ("spill" if why_not else "place") if local else "group"


def cannot_place(config: JobConfig) -> Optional[str]:
    """Why --shuffle place cannot write this run's shards, or None. It plans each
    window's frame size before cutting it (shuffle/place.py): latent windows, whose
    frames are of known sizes (an image's is known once it is encoded; an --encoder
    needs pixel input), written at offsets into an uncompressed shard on this machine's
    filesystem (not a store's objects)."""
    if config.inputs.kind != "latents":
        return (f"pixel input ({config.inputs.kind}): an encoded frame's size is known "
                "only once it is encoded")
    if config.shards.compression != "none":
        return f"--compression {config.shards.compression}: a compressed stream cannot be " \
               "written at offsets"
    if paths.is_remote(config.io.output_dir):
        return f"--output_dir {config.io.output_dir}: a store's objects are not written at " \
               "offsets"
    return None


def for_runner(config: JobConfig, runner: str, pipeline_args: list[str]) -> JobConfig:
    """The config with what the runner decides: the shuffle mode. `Refused` for flags and
    pipeline options the runner cannot take (check_options), before anything is made."""
    if config.io.detach and is_local(runner):
        raise Refused(f"--detach: a local run ({runner}) is this process; --detach submits "
                      "a job to a distributed runner (e.g. --runner DataflowRunner) and exits")
    shuffle = shuffle_mode(runner, config)   # the job's flags first
    if runner != "DataflowRunner" and PipelineOptions(pipeline_args).view_as(
            TestOptions).dry_run:
        raise Refused(f"--dry_run: only DataflowRunner builds a job without running it; "
                      f"{runner} would run it (give --runner DataflowRunner and its options)")
    check_options(pipeline_args, runner, config.io.detach)
    return dataclasses.replace(config, shards=dataclasses.replace(config.shards, shuffle=shuffle))


def check_options(pipeline_args: list[str], runner: str, detach: bool) -> None:
    """`Refused`, in one line, for a distributed run whose options would fail once it
    holds the output directory's lease, or whose workers could not run the job: Beam's
    own checks of the options (those it makes at submission), workers that live in
    this process under --detach, Dataflow workers without the job's package."""
    if is_local(runner):
        return
    options = PipelineOptions(pipeline_args)
    environment = (options.view_as(PortableOptions).environment_type or "").upper()
    if detach and environment == "LOOPBACK":
        raise Refused("--detach with --environment_type LOOPBACK: the workers would run in "
                      "this process, which --detach ends once the job is submitted; use "
                      "EXTERNAL or DOCKER workers, or leave out --detach")
    if runner == "DataflowRunner" and not (options.view_as(SetupOptions).setup_file or
                                           options.view_as(WorkerOptions).sdk_container_image):
        raise Refused("DataflowRunner: pass --setup_file ./setup.py (the job's package and "
                      "its requirements are staged for the workers) or --sdk_container_image "
                      "(an image that holds them, docker/); without either the workers "
                      "cannot import beam_jobs")
    beam_log = logging.getLogger("apache_beam.options.pipeline_options")
    level = beam_log.level
    beam_log.setLevel(logging.ERROR)   # it logs each error too: the one line is ours
    try:
        errors = PipelineOptionsValidator(options, create_runner(runner)).validate()
    finally:
        beam_log.setLevel(level)
    if errors:
        raise Refused(f"{runner}: {' '.join(errors[0].split())}")
