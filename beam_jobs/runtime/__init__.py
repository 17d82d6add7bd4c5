"""Where the job runs: every local core (`local_workers`, with `forked_workers`), and
what a remote worker installs (`staging`)."""
