"""Apache Beam jobs that turn long videos into shuffled, fixed-shape window shards."""
