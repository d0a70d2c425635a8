"""The I/O seam's stock filesystem on real files: what open_write, write, fsync, rename, exchange and the
directory calls do, write_all's handling of short writes, and which filesystem a thread's code uses."""

from __future__ import annotations

import errno
import os
import threading

import pytest
import xxhash

from resilience.errors import IntegrityError
from resilience.storage import LocalFileSystem, current, use, write_all
from resilience.storage.base import FileSystem, WriteStream

DATA = bytes(range(256)) * 4096  # 1 MiB: several of the stream's hashing pieces


@pytest.fixture
def fsyncs(monkeypatch):
    """The file descriptors os.fsync was called on (the real fsync still runs)."""
    seen, real = [], os.fsync

    def spy(fd):
        seen.append(os.readlink(f"/proc/self/fd/{fd}"))
        real(fd)

    monkeypatch.setattr(os, "fsync", spy)
    return seen


def test_a_write_stream_writes_everything_and_hashes_it(tmp_path, fsyncs):
    fs = LocalFileSystem()
    assert isinstance(fs, FileSystem)
    path = str(tmp_path / "shard.bin")
    with fs.open_write(path) as stream:
        assert isinstance(stream, WriteStream)
        assert stream.write(DATA) == len(DATA) and stream.write(b"tail") == 4 and stream.tell() == len(DATA) + 4
    assert stream.size == len(DATA) + 4 and stream.digest == xxhash.xxh3_128_hexdigest(DATA + b"tail")
    assert (tmp_path / "shard.bin").read_bytes() == DATA + b"tail"
    assert fsyncs == [path]  # closed with sync=True (the default): fsynced once
    stream.close()  # closing again does nothing
    assert fsyncs == [path]


def test_sync_false_skips_the_fsync_and_a_seek_drops_the_digest(tmp_path, fsyncs):
    fs = LocalFileSystem()
    stream = fs.open_write(str(tmp_path / "a"), sync=False)
    stream.write(b"0123456789")
    stream.seek(2)
    stream.write(b"ab")
    stream.close()
    assert (tmp_path / "a").read_bytes() == b"01ab456789"
    assert stream.size == 10 and stream.digest is None  # the hash no longer matches the bytes: none given
    assert fsyncs == []
    explicit = fs.open_write(str(tmp_path / "b"), sync=False)
    explicit.fsync()
    explicit.close()
    assert fsyncs == [str(tmp_path / "b")]


def test_rename_replaces_and_exchange_swaps(tmp_path):
    fs = LocalFileSystem()
    (tmp_path / "new").write_text("new")
    (tmp_path / "old").write_text("old")
    fs.rename(str(tmp_path / "new"), str(tmp_path / "old"))
    assert os.listdir(tmp_path) == ["old"] and (tmp_path / "old").read_text() == "new"
    (tmp_path / "a").mkdir()
    (tmp_path / "a" / "x").write_text("in a")
    (tmp_path / "b").mkdir()
    (tmp_path / "b" / "y").write_text("in b")
    fs.exchange(str(tmp_path / "a"), str(tmp_path / "b"))
    assert fs.listdir(str(tmp_path / "a")) == ["y"] and fs.listdir(str(tmp_path / "b")) == ["x"]
    assert sorted(os.listdir(tmp_path)) == ["a", "b", "old"]  # nothing left aside
    with pytest.raises(FileNotFoundError):
        fs.exchange(str(tmp_path / "a"), str(tmp_path / "missing"))
    assert fs.listdir(str(tmp_path / "a")) == ["y"]


def test_folders_fsync_list_sorted_and_answer_questions(tmp_path, fsyncs):
    fs = LocalFileSystem()
    deep = str(tmp_path / "x" / "y")
    fs.mkdir(deep)
    fs.mkdir(deep)  # already there: fine
    for name in ("c", "a", "b"):
        (tmp_path / "x" / "y" / name).write_bytes(name.encode() * 3)
    assert fs.listdir(deep) == ["a", "b", "c"]
    fs.fsync_dir(deep)
    assert fsyncs == [deep]
    assert fs.is_dir(deep) and not fs.is_dir(os.path.join(deep, "a")) and fs.exists(os.path.join(deep, "a"))
    assert fs.size(os.path.join(deep, "b")) == 3
    fs.unlink(os.path.join(deep, "a"))
    assert fs.listdir(deep) == ["b", "c"]
    fs.rmtree(str(tmp_path / "x"))
    assert not fs.exists(str(tmp_path / "x"))
    (tmp_path / "file").write_text("x")
    with pytest.raises(NotADirectoryError):
        fs.fsync_dir(str(tmp_path / "file"))


def test_open_read_opens_regular_files_only(tmp_path):
    fs = LocalFileSystem()
    (tmp_path / "f").write_bytes(b"abc")
    with fs.open_read(str(tmp_path / "f")) as f:
        assert f.read() == b"abc"
    os.mkfifo(tmp_path / "fifo")
    other_end = os.open(tmp_path / "fifo", os.O_RDWR)  # so that a plain open() would not block this test
    try:
        with pytest.raises(IntegrityError, match="fifo: regular file failed: is a FIFO"):
            fs.open_read(str(tmp_path / "fifo"))  # refused by type, never opened
    finally:
        os.close(other_end)


class _Short:
    """A stream whose write stores at most `step` bytes per call (0: no progress)."""

    def __init__(self, step: int):
        self.step, self.got, self.path, self.calls = step, bytearray(), "short.bin", 0

    def write(self, data) -> int:
        self.calls += 1
        assert self.calls < 1000, "write_all keeps calling a write that makes no progress"
        piece = bytes(data[: self.step])
        self.got += piece
        return len(piece)


def test_write_all_continues_short_writes_and_fails_without_progress():
    stream = _Short(7)
    assert write_all(stream, DATA[:100]) == 100 and bytes(stream.got) == DATA[:100]
    with pytest.raises(OSError) as e:
        write_all(_Short(0), b"abc")
    assert e.value.errno == errno.EIO and "write made no progress on short.bin" in str(e.value)
    assert write_all(_Short(0), b"") == 0  # nothing to write: no write needed


def test_use_routes_the_process_or_only_the_calling_thread():
    stock = current()
    mine, theirs = LocalFileSystem(), LocalFileSystem()
    seen = {}

    def other_thread():
        seen["other"] = current()

    with use(mine):
        assert current() is mine
        with use(theirs, this_thread=True):
            assert current() is theirs
            t = threading.Thread(target=other_thread)
            t.start()
            t.join()
            with use(LocalFileSystem(), this_thread=True):
                pass
            assert current() is theirs  # an inner override gives back the outer one
        assert current() is mine
    assert seen["other"] is mine  # a thread's override is its own
    assert current() is stock
