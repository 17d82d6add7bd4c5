"""Cutting videos into windows: how a run cuts (`config`), windows cut from a stream of
frames (`windows`, pure), videos -> keyed window records (`examples.CutWindows`), and
video ids that come more than once (`duplicates`), a video's content digest (`digest`).
Where windows start, where a window sorts and which split a video goes to are the
format's (readers/format/windows.py, keys.py)."""
