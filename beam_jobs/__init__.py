"""Apache Beam jobs that turn long videos into shuffled, fixed-shape window shards."""

__version__ = "0.2.0"   # recorded in every dataset.json; setup.py reads it from here
