"""Work handed to a thread of its own while the caller prepares the next: writes (system
calls that let the GIL go) overlap the Python that makes what they write, on a second
core. One call runs at a time, and the caller waits for it before it hands over the
next: so at most one piece is in flight beside the one being made, and the pieces run in
the order given. The thread lives until `close` (a DoFn's teardown, or the end of a
`with` block): nothing is left running after it.

The spill's sorted files are written so (shuffle/write.py). A shard task's writes are
not: its stage is bound by the page cache's pace, not by its reads, and gained nothing
(docs/benchmarks.md).
"""
from __future__ import annotations

import concurrent.futures
from typing import Any, Callable, Optional


class OneBehind:
    """`with OneBehind("name") as behind: behind.submit(fn, *args) ...; behind.wait()`."""

    def __init__(self, name: str):
        self._pool = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix=name)
        self._running: Optional[concurrent.futures.Future] = None

    def submit(self, fn: Callable[..., Any], *args: Any) -> Any:
        """Wait for the call running, start fn(*args), and return the finished call's
        result (None if there was none); its error is raised here instead."""
        done = self.wait()
        self._running = self._pool.submit(fn, *args)
        return done

    def wait(self) -> Any:
        """The result of the call running, once it ends (None if none runs)."""
        running, self._running = self._running, None
        return None if running is None else running.result()

    def close(self) -> None:
        """Wait for the call running (a running write cannot be stopped half way), drop
        its result or error, and end the thread. Closing twice does nothing more."""
        self._running = None
        self._pool.shutdown(wait=True)

    def __enter__(self) -> "OneBehind":
        return self

    def __exit__(self, *error) -> None:
        """Waits for the call running; its error is raised unless the block already
        raises one."""
        try:
            if error[0] is None:
                self.wait()
        finally:
            self.close()
