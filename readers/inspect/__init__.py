"""Looking inside a dataset: the command, `python -m readers.inspect` (command.py, which
__main__.py runs), and what it does besides the summary: `--verify` (verify.py),
`--stats` (stats.py), `--preview`'s pictures (preview.py), and where a page or a picture
is written (output.py). The `--report` page is readers/report/'s, which takes its
pictures and statistics from here.

Nothing is imported here, so that the report imports preview.py and stats.py without
the command, which imports the report.
"""
