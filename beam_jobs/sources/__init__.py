"""Inputs of the job: latent TFRecords, manifests of frame folders and video files."""
from __future__ import annotations

from beam_jobs.core.configs import JobConfig
from beam_jobs.core.frames import BadRecord
from beam_jobs.sources.base import Source, SourceError


def build_source(config: JobConfig) -> Source:
    """The source of the input's kind, its format probed from the first inputs, so that
    an input that cannot be read stops the job (SourceError) before any work.

    Each kind's module is imported here, once the flags are known to be good: they
    bring in TensorFlow, PyAV and Pillow.
    """
    if config.inputs.kind == "latents":
        from beam_jobs.sources.latents import build_source as build
    else:
        from beam_jobs.sources.pixels import build_source as build
    try:
        return build(config)
    except BadRecord as e:
        raise SourceError(f"--input: {e}") from None
