"""The global shuffle and the shard writes: windows keyed by a hash -> sorted files
(spill or group) -> a shard plan (pure) -> balanced, deterministic shards; or (place)
the windows' planned sizes through the same sort, then each window written at its place.

- `config`: how a run's windows become shards (`ShuffleConfig`).
- `write`: `WriteShuffledShards`, the composite transform.
- `place`: `WriteInPlace`, the composite transform of --shuffle place.
- `plan`: which ranks each shard holds and where they lie.
- `sorted_files`: the temp files: sorted records framed as in a shard, with an index.
"""
