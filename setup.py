"""One distribution: the light reader by default, the tf.data reader and the job as extras.

`pip install video-window-shards` gives readers.numpy, its PyTorch and Grain adapters and
`readers.inspect --verify`, without TensorFlow or Beam (about 100 MB, measured in
docs/readers.md). `[tf]` adds TensorFlow for `readers.make_dataset`, `[gcs]` gs:// for the
numpy reader, `[beam]` the job and what it imports. The pins live in
beam_jobs/dependencies.py, which the job reads too: a Dataflow worker installs this sdist
(--setup_file) without extras, so the job stages the rest of what it needs itself.
"""
import re
import runpy
from pathlib import Path

from setuptools import find_packages, setup

HERE = Path(__file__).parent
VERSION = re.search(r'__version__ = "([^"]+)"',
                    (HERE / "beam_jobs" / "__init__.py").read_text()).group(1)

DEPENDENCIES = runpy.run_path(str(HERE / "beam_jobs" / "dependencies.py"))

setup(
    name="video-window-shards",
    version=VERSION,
    description="Long videos to globally shuffled, fixed-shape TFRecord window shards, "
                "and readers for them (numpy, PyTorch, Grain, tf.data)",
    python_requires=">=3.10",
    packages=find_packages(include=["beam_jobs", "beam_jobs.*", "readers", "readers.*"]),
    install_requires=DEPENDENCIES["READER"],
    extras_require=DEPENDENCIES["EXTRAS"],
    entry_points={"console_scripts": ["readers.inspect = readers.inspect.command:main"]},
)
