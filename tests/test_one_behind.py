"""core.one_behind.OneBehind: work on a thread of its own, one call at a time, in order,
its errors raised to the caller, and nothing left running after the block."""
import threading

import pytest

from beam_jobs.core.one_behind import OneBehind


def test_calls_run_in_order_and_each_result_comes_back_once():
    done = []
    with OneBehind("test") as behind:
        results = [behind.submit(lambda i=i: done.append(i) or i * 10) for i in range(5)]
        results.append(behind.wait())
        assert behind.wait() is None          # nothing runs any more
    assert done == [0, 1, 2, 3, 4]
    assert results == [None, 0, 10, 20, 30, 40]


def test_the_next_call_waits_for_the_one_running():
    """At most one call is in flight: what the caller holds besides it is bounded."""
    running, release, started = threading.Event(), threading.Event(), []
    with OneBehind("test") as behind:
        behind.submit(lambda: started.append("first") or running.set() or release.wait(60))
        assert running.wait(60)
        handing = threading.Thread(target=behind.submit, args=(started.append, "second"))
        handing.start()
        handing.join(0.5)
        assert handing.is_alive() and started == ["first"]   # held until the first ends
        release.set()
        handing.join(60)
    assert started == ["first", "second"]


def test_an_error_on_the_thread_is_raised_to_the_caller():
    def broken():
        raise OSError("disk full")
    with OneBehind("test") as behind:
        behind.submit(broken)
        with pytest.raises(OSError, match="disk full"):
            behind.submit(lambda: None)
    with pytest.raises(OSError, match="disk full"):   # or when the block ends
        with OneBehind("test") as behind:
            behind.submit(broken)


def _threads(name: str) -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name.startswith(name)]


def test_the_block_waits_for_its_last_call_and_leaves_no_thread():
    finished = []
    with pytest.raises(KeyError):   # the block's own error is the one raised
        with OneBehind("ending") as behind:
            behind.submit(lambda: threading.Event().wait(0.2) or finished.append(1))
            assert _threads("ending")
            raise KeyError("the caller's")
    assert finished == [1]
    assert not _threads("ending")


def test_close_waits_for_the_call_running_and_drops_its_error():
    """What a failed bundle's teardown does: nothing runs on after it, nothing raises."""
    finished = []

    def broken():
        threading.Event().wait(0.2)
        finished.append(1)
        raise OSError("disk full")
    behind = OneBehind("closing")
    behind.submit(broken)
    behind.close()
    behind.close()
    assert finished == [1] and not _threads("closing")
