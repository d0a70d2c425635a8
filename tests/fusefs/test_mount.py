"""A mount never outlives its job: every exit path unmounts, a dead file system or a dead runner leaves
no mount behind for long, and clean_stale_mounts clears what a killed run left."""

import multiprocessing as mp
import os
import signal
import threading
import time

import pytest

from resilience.errors import ConfigError
from resilience.fusefs import Mount, clean_stale_mounts, fuse_available, is_mounted, mounted

from .procs import WAIT, gone


def test_fuse_is_available_here(fuse):
    assert fuse_available() == (True, "")


def test_an_exception_in_the_block_still_unmounts(dirs):
    backing, mnt, log = dirs
    with pytest.raises(KeyError):
        with mounted(backing, mnt, log=log) as m:
            assert is_mounted(mnt)
            raise KeyError("boom")
    assert not is_mounted(mnt) and gone(m.pid) and m.errors == []


def test_a_busy_mount_is_detached_lazily(dirs):
    """A file still open at the end (here this process's) makes fusermount3 -u fail; the mount is detached
    at once and the file system ends as soon as the file is closed."""
    backing, mnt, log = dirs
    (backing / "held").write_bytes(b"h")
    with mounted(backing, mnt, log=log) as m:
        held = open(mnt / "held", "rb")
        threading.Timer(1.0, held.close).start()  # closed while the unmount waits
    assert not is_mounted(mnt) and gone(m.pid)
    assert held.closed and not any("killed" in e for e in m.errors)


def test_a_killed_file_system_leaves_no_mount(dirs):
    backing, mnt, log = dirs
    with mounted(backing, mnt, log=log) as m:
        os.kill(m.pid, signal.SIGKILL)
        assert gone(m.pid)
        with pytest.raises(OSError):  # "transport endpoint is not connected"
            os.listdir(mnt)
    assert not is_mounted(mnt)


def test_clean_stale_mounts_clears_what_a_killed_run_left(dirs, tmp_path):
    backing, mnt, log = dirs
    m = Mount(backing, mnt, log=log).start()
    try:
        os.kill(m.pid, signal.SIGKILL)  # as if the run died before its unmount
        assert gone(m.pid) and is_mounted(mnt)
        assert clean_stale_mounts(tmp_path / "elsewhere") == []
        assert clean_stale_mounts(tmp_path) == [str(mnt)]
        assert not is_mounted(mnt)
    finally:
        m.unmount()


def _runner(backing, mnt, conn):
    with mounted(backing, mnt) as m:
        conn.send(("mounted", m._stderr, m.pid))
        time.sleep(WAIT)


def test_a_mount_does_not_outlive_its_runner(dirs):
    """The runner is SIGKILLed with the mount up: the file system sees its command pipe end, unmounts
    itself and exits."""
    backing, mnt, _ = dirs
    here, there = mp.get_context("fork").Pipe()
    runner = mp.get_context("fork").Process(target=_runner, args=(str(backing), str(mnt), there))
    runner.start()
    try:
        assert here.poll(WAIT)
        said, stderr, server = here.recv()
        assert said == "mounted" and is_mounted(mnt) and os.path.exists(stderr)
    finally:
        runner.kill()
        runner.join()
    end = time.monotonic() + WAIT
    while is_mounted(mnt) and time.monotonic() < end:
        time.sleep(0.05)
    assert not is_mounted(mnt)
    assert gone(server)  # and its temporary libfuse message file goes with it
    assert not os.path.exists(stderr)


def test_wrong_folders_are_refused_before_mounting(tmp_path):
    (tmp_path / "b" / "inner").mkdir(parents=True)
    (tmp_path / "m").mkdir()
    with pytest.raises(ConfigError, match="log"):
        Mount(tmp_path / "b", tmp_path / "m", log=tmp_path / "m" / "log")
    with pytest.raises(ConfigError, match="overlap"):
        Mount(tmp_path / "b", tmp_path / "b" / "inner")
    with pytest.raises(ConfigError, match="not a folder"):
        Mount(tmp_path / "b", tmp_path / "missing")
    with pytest.raises(ConfigError, match="operation log"):
        Mount(tmp_path / "b", tmp_path / "m", faults=[{"kind": "lost_unsynced_writes"}])
    with pytest.raises(ConfigError, match="errno"):
        Mount(tmp_path / "b", tmp_path / "m", faults=[{"kind": "io_error", "errno": "ENOPE"}])


def test_clean_stale_mounts_leaves_a_live_mount_alone(dirs, tmp_path):
    """A run still going on beside (another command under the same --out) keeps its mount."""
    backing, mnt, log = dirs
    with mounted(backing, mnt, log=log):
        assert clean_stale_mounts(tmp_path) == []
        assert is_mounted(mnt)
