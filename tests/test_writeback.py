"""writeback.start_writeback: advice to the kernel, given by one thread a process; it
never changes a file, and never fails or slows a run."""
import logging
import os
import threading

import pytest

from beam_jobs.core import writeback


@pytest.fixture
def warnings_said(caplog):
    """What the writeback thread says: a warning for any error it meets."""
    caplog.set_level(logging.WARNING, logger=writeback.__name__)
    return caplog.records


def test_complete_shards_are_handed_to_writeback_unchanged(tmp_path, warnings_said):
    shards = [tmp_path / f"train-{i:05d}-of-00003.tfrecord" for i in range(3)]
    data = [os.urandom(1 << 20) for _ in shards]
    for path, content in zip(shards, data, strict=True):
        path.write_bytes(content)
        writeback.start_writeback(str(path))
    writeback.wait_for_writebacks()
    assert not warnings_said
    assert [path.read_bytes() for path in shards] == data


def test_a_file_gone_before_its_writeback_is_no_error(tmp_path, warnings_said):
    path = tmp_path / "deleted"
    path.write_bytes(b"x")
    writeback.start_writeback(str(path))
    path.unlink()
    writeback.start_writeback(str(tmp_path / "never-there"))
    writeback.wait_for_writebacks()
    assert not warnings_said


def test_thousands_of_shards_on_a_busy_disk_take_one_thread(tmp_path, monkeypatch):
    """Small shards written faster than the disk takes them must not make a thread
    each: every advice here waits (a busy disk) until the threads are counted."""
    disk_free = threading.Event()
    monkeypatch.setattr(writeback, "_write_back", lambda path: disk_free.wait(30))
    writeback.wait_for_writebacks()   # earlier tests' advice given
    before = threading.active_count()
    for _ in range(2000):
        writeback.start_writeback(str(tmp_path / "shard"))
    assert threading.active_count() <= before + 1
    disk_free.set()
    writeback.wait_for_writebacks()
