"""The commit and its sidecars: after the shards are written, the sidecar files, the
decision (`decide`, pure), the dataset.json (`dataset`) and its one move into place
(`finalize.Finalize`); `append` is what an --append reads of the dataset it adds to and
checks against it."""
