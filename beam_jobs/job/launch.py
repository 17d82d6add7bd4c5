"""What a run settles before it touches the output directory, and the configs it hands
each part of the pipeline, derived once from the flags, the runner and the source."""
from __future__ import annotations

import dataclasses
import functools
import logging
import os
import time
from typing import Optional

from apache_beam.options.pipeline_options import GoogleCloudOptions, PipelineOptions, TestOptions

from beam_jobs.commit import append, videos_file
from beam_jobs.commit.dataset import DatasetConfig
from beam_jobs.core import paths
from beam_jobs.core.configs import JobConfig
from beam_jobs.cut.config import CutConfig, ProgressConfig
from beam_jobs.cut.examples import CutWindows
from beam_jobs.encoders import extra_of
from beam_jobs.job import job_states, runners
from beam_jobs.job.errors import Refused
from beam_jobs.job.flags import flag_defaults, recorded_flags
from beam_jobs.outdir import local_temp_base
from beam_jobs.outdir.holder import Ask, Job
from beam_jobs.runtime import local_workers, staging
from beam_jobs.shuffle import config as shuffle_config
from beam_jobs.sources import Source
from readers import format as data_format
from readers.format.windows import Window

_LOG = logging.getLogger("beam_jobs.make_shards")


@dataclasses.dataclass(frozen=True)
class Launch:
    """A run as settled before the output directory is touched."""
    config: JobConfig
    pipeline_args: tuple[str, ...]   # Beam's options, with a --job_name on a distributed runner
    runner: str                      # command_line.runner_name
    source: Source
    started: float                   # time.monotonic() when the command started

    @classmethod
    def settle(cls, config: JobConfig, pipeline_args: list[str], runner: str,
               source: Source, started: Optional[float] = None) -> Launch:
        """A distributed run gets a job name: its lease names the job."""
        if not runners.is_local(runner) and not PipelineOptions(pipeline_args).view_as(
                GoogleCloudOptions).job_name:
            name = time.strftime("make-shards-%Y%m%d-%H%M%S") + f"-{os.getpid()}"
            pipeline_args = [*pipeline_args, f"--job_name={name}"]
        return cls(config, tuple(pipeline_args), runner, source,
                   time.monotonic() if started is None else started)

    @property
    def local(self) -> bool:
        return runners.is_local(self.runner)

    @property
    def dry_run(self) -> bool:
        """Dataflow's --dry_run=True: the job is only built. It must not touch the output
        directory, which may be gs:// on a machine without credentials or network."""
        return bool(PipelineOptions(list(self.pipeline_args)).view_as(TestOptions).dry_run)

    @property
    def job_name(self) -> Optional[str]:
        """The job's name on a distributed runner (None on a local one)."""
        if self.local:
            return None
        return PipelineOptions(list(self.pipeline_args)).view_as(GoogleCloudOptions).job_name

    @property
    def job(self) -> Optional[Job]:
        """The job a distributed run submits, which its lease names (None on a local
        runner)."""
        if self.local:
            return None
        name = self.job_name
        assert name is not None   # settle gives a distributed run a --job_name
        return job_states.job_of(self.runner, name, PipelineOptions(list(self.pipeline_args)))

    def ask(self) -> Ask:
        """How this run asks a runner about a job that holds a lease."""
        return job_states.asker(list(self.pipeline_args))

    @functools.cached_property
    def all_cores(self) -> bool:
        """--all_cores, and worth its workers (local_workers)."""
        return self.config.io.all_cores and local_workers.worth_workers(
            self.source.running_mode, self.source.stored_bytes, list(self.pipeline_args))

    def can_fork_workers(self) -> bool:
        """Whether --all_cores's workers can be forks of this process (forked_workers)."""
        return (self.all_cores and self.source.running_mode == "multi_processing"
                and local_workers.can_fork(list(self.pipeline_args), self.runner))

    def local_temp(self) -> Optional[str]:
        """Where a local run spilling to a remote output keeps its temp data (an object
        per spill on gs:// would be slow): this machine's disk. None: in the output."""
        if self.config.shards.shuffle != "spill" or not paths.is_remote(
                self.config.io.output_dir):
            return None
        return local_temp_base(PipelineOptions(list(self.pipeline_args)).view_as(
            GoogleCloudOptions).temp_location)

    def options(self, forked_workers: bool) -> PipelineOptions:
        """Beam's options for the run: local workers as --all_cores asks (in_memory when
        they are forks), a worker's requirements staged with --setup_file."""
        options = local_workers.pipeline_options(
            list(self.pipeline_args), self.all_cores,
            "in_memory" if forked_workers else self.source.running_mode)
        encoder = self.config.encoder.encoder
        staging.stage_requirements(options, extra_of(encoder) if encoder else None)
        return options

    def note_group_memory(self) -> None:
        """--shuffle group on a local runner: one line with the memory its in-memory
        GroupByKey will need."""
        if self.config.shards.shuffle != "group" or not self.local:
            return
        windows, stored = self.windows, self.source.stored_bytes
        _LOG.warning("--shuffle group on %s holds every window in this machine's memory: "
                     "about %.1f GB for an estimated %.2f GB of windows (0.75 GB + 5x); "
                     "--shuffle spill (auto's choice here) holds up to twice "
                     "--spill_buffer_mb per worker", self.runner,
                     shuffle_config.group_memory(windows, stored) / 2**30,
                     shuffle_config.output_bytes(windows, stored) / 2**30)

    # The parts' configs.

    @property
    def windows(self) -> Window:
        return self.config.windows.to_window()

    def cut_config(self) -> CutConfig:
        return CutConfig(self.windows, dict(self.config.shards.splits),
                         self.config.shards.seed)

    def progress_config(self, workers: int) -> ProgressConfig:
        return ProgressConfig(self.source.total_videos, workers,
                              self.config.io.progress_interval)

    def cut_windows(self, workers: int, known_digests=None, placing: Optional[str] = None
                    ) -> CutWindows:
        """The run's cut (`workers`: how many take part, for its progress lines;
        `known_digests`, `placing`: CutWindows')."""
        source = self.source
        return CutWindows(source.features, self.cut_config(), source.pad_frame, source.encoder,
                          self.progress_config(workers), self.config.io.allow_nonfinite,
                          known_digests, placing)

    def shard_config(self) -> shuffle_config.ShuffleConfig:
        return shuffle_config.ShuffleConfig.for_run(self.config.shards, self.windows,
                                                     self.source.stored_bytes)

    @functools.cached_property
    def dataset_config(self) -> DatasetConfig:
        """What dataset.json says besides the counts (the encoder's record holds its
        model's checksum: made once)."""
        source = self.source
        return DatasetConfig(
            features=tuple(source.features), windows=self.windows,
            splits=tuple(self.config.shards.splits), compression=self.config.shards.compression,
            max_failure_fraction=self.config.shards.max_failure_fraction,
            flags=recorded_flags(self.config),
            encoder=source.encoder.to_json() if source.encoder else None,
            input_kind=self.config.inputs.kind, frame=source.frame, labels=source.labels)

    def check_append(self, base: data_format.DatasetSpec) -> None:
        """`Refused` when this run may not add to `base` (commit/append.check), or
        its videos file is not the one it was committed with (commit/videos_file)."""
        out = self.config.io.output_dir
        try:
            append.check(base, out, self.dataset_config, flag_defaults())
            videos_file.check(out, base)
        except append.AppendError as e:
            raise Refused(str(e)) from None
