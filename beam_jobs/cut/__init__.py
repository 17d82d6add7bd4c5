"""Cutting videos into windows: where windows start (`windows`, pure), where a window
sorts and which split a video goes to (`keys`), videos -> keyed window examples
(`examples.CutWindows`), and video ids that come more than once (`duplicates`)."""
