"""The leaf of the job: the types and helpers every part shares.

frames, records that flow between parts (keyed examples, video counts, written shards,
failure rows), the flags' configs, ids and paths, literal-path storage, and progress.
Nothing here imports a part of the job (sources, encoders, cut, shuffle, commit, outdir,
runtime, job); docs/contributing.md draws the arrows, and tests/test_architecture.py
checks them.
"""
