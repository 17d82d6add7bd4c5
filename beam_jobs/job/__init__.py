"""The job around its pipeline: the command line (`flags`), what a run settles before it
touches anything (`launch`), its hold on the output directory and its interrupts
(`lifecycle`), how it ends (`outcome`, `errors`). make_shards.py puts them together."""
