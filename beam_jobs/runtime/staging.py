"""What a remote worker installs: the package's sdist, and the job's own requirements.

Beam stages the sdist that `--setup_file` builds, and a worker installs it with pip
without extras (Beam 2.77's boot: `pip install workflow.tar.gz`), so it gets only the
package's install_requires, the light reader's (beam_jobs/dependencies.py). The job needs
more: PyAV and gcsfs, and its encoder's library. So a run that stages the package also
stages those as a requirements file, which the worker's boot installs with
`pip install -r` before the sdist. Beam would download them at submission to stage them
as files (its requirements cache); the job skips that unless `--requirements_cache` is
given, so that a submission, a dry run too, needs no download: workers then install
them from PyPI when they start. A run with `--sdk_container_image` stages nothing more:
the image holds what the job needs (docker/), and Beam warns against both at once.
"""
from __future__ import annotations

import os
import tempfile
from typing import Optional

from apache_beam.options.pipeline_options import PipelineOptions, SetupOptions, WorkerOptions

from beam_jobs.dependencies import worker_requirements

SKIP_CACHE = "skip"       # Beam's --requirements_cache value that downloads nothing


def stage_requirements(options: PipelineOptions, encoder_extra: Optional[str]) -> None:
    """With --setup_file (and no container image), point --requirements_file at the
    worker's requirements: the job's (and `encoder_extra`'s, the extra of its encoder's
    library), after those of a --requirements_file given."""
    setup = options.view_as(SetupOptions)
    if setup.setup_file is None or options.view_as(WorkerOptions).sdk_container_image:
        return
    lines = worker_requirements(encoder_extra)
    if setup.requirements_file:
        with open(setup.requirements_file) as f:
            lines = [line.rstrip("\n") for line in f] + lines
    # Beam reads the file when the job is submitted (and a dry run's result still names
    # it): it stays, as Beam's own sdist does, in a folder of the system's temp dir.
    path = os.path.join(tempfile.mkdtemp(prefix="make-shards-"), "requirements.txt")
    with open(path, "w") as f:
        f.write("\n".join(lines) + "\n")
    setup.requirements_file = path
    if setup.requirements_cache is None:
        setup.requirements_cache = SKIP_CACHE
