"""The mount shows the backing folder exactly: what is written, renamed, synced and removed through it is
what the backing folder holds, and what it reads back is what was written."""

import os

import torch

from resilience.fusefs import mounted, read_log
from resilience.storage.local import LocalFileSystem
from tests.folders import contents


def test_files_and_folders_round_trip(dirs):
    backing, mnt, log = dirs
    (backing / "before.txt").write_bytes(b"old")
    with mounted(backing, mnt, log=log):
        assert os.listdir(mnt) == ["before.txt"]
        old_umask = os.umask(0o002)  # not the file system's own umask (022 here)
        try:
            os.makedirs(mnt / "ckpt" / "iter_1", mode=0o777)
        finally:
            os.umask(old_umask)
        data = os.urandom(3 << 20)  # several write requests
        with open(mnt / "ckpt" / "iter_1" / "shard.bin", "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
            os.fdatasync(f.fileno())
        fd = os.open(mnt / "ckpt", os.O_RDONLY | os.O_DIRECTORY)
        os.fsync(fd)  # a folder's fsync
        os.close(fd)
        os.rename(mnt / "ckpt" / "iter_1", mnt / "ckpt" / "iter_2")
        os.rename(mnt / "before.txt", mnt / "ckpt" / "moved.txt")
        with open(mnt / "ckpt" / "moved.txt", "ab") as f:  # O_APPEND lands at the end
            f.write(b"+new")
        with open(mnt / "ckpt" / "trunc.txt", "wb") as f:
            f.write(b"0123456789")
        os.truncate(mnt / "ckpt" / "trunc.txt", 4)
        os.link(mnt / "ckpt" / "trunc.txt", mnt / "ckpt" / "hard.txt")
        os.makedirs(mnt / "gone" / "deeper")
        (mnt / "gone" / "deeper" / "x").write_bytes(b"x")
        os.unlink(mnt / "gone" / "deeper" / "x")
        os.rmdir(mnt / "gone" / "deeper")
        os.rmdir(mnt / "gone")
        with open(mnt / "ckpt" / "iter_2" / "shard.bin", "rb") as f:
            assert f.read() == data
        seen = contents(mnt)
    assert (backing / "ckpt" / "iter_2").stat().st_mode & 0o777 == 0o775  # the caller's umask, applied once
    assert (
        contents(backing)
        == seen
        == {
            "ckpt/": None,
            "ckpt/iter_2/": None,
            "ckpt/iter_2/shard.bin": data,
            "ckpt/moved.txt": b"old+new",
            "ckpt/trunc.txt": b"0123",
            "ckpt/hard.txt": b"0123",
        }
    )
    ops = {r["op"] for r in read_log(log)}
    assert {
        "create",
        "open",
        "write",
        "read",
        "fsync",
        "fdatasync",
        "fsync_dir",
        "rename",
        "link",
        "unlink",
        "mkdir",
        "rmdir",
        "truncate",
        "flush",
        "release",
    } <= ops


def test_an_exchange_stays_an_exchange(dirs):
    """renameat2(RENAME_EXCHANGE) through the mount swaps both names (passed as a plain rename, one file
    would be lost)."""
    backing, mnt, log = dirs
    with mounted(backing, mnt, log=log):
        (mnt / "a").write_bytes(b"A")
        (mnt / "b").write_bytes(b"B")
        LocalFileSystem().exchange(str(mnt / "a"), str(mnt / "b"))
    assert (backing / "a").read_bytes() == b"B" and (backing / "b").read_bytes() == b"A"
    assert [r["path"] for r in read_log(log) if r["op"] == "exchange"] == [str(mnt / "a")]


def test_torch_save_and_load_through_the_mount(dirs):
    backing, mnt, log = dirs
    state = {"w": torch.randn(256, 1024), "step": torch.tensor(7), "names": ["a", "b"]}
    with mounted(backing, mnt, log=log):
        torch.save(state, mnt / "model.pt")
        loaded = torch.load(mnt / "model.pt", weights_only=True)
    assert torch.equal(loaded["w"], state["w"]) and loaded["step"].item() == 7 and loaded["names"] == ["a", "b"]
    again = torch.load(backing / "model.pt", weights_only=True)
    assert torch.equal(again["w"], state["w"])


def test_the_log_speaks_the_seams_fields(dirs):
    """fuse.jsonl carries the seam oplog's fields with the pid; the seam-format log beside it reads back
    with faults.read_ops."""
    from resilience.faults import read_ops

    backing, mnt, log = dirs
    with mounted(backing, mnt, log=log, ranks={0: os.getpid()}):
        with open(mnt / "f", "wb") as f:
            f.write(b"abc")
            f.flush()
            os.fsync(f.fileno())
        os.rename(mnt / "f", mnt / "g")
    write = next(r for r in read_log(log) if r["op"] == "write")
    assert {"op", "rank", "pid", "seq", "t", "path", "stream", "offset", "length", "thread"} <= set(write)
    assert write["rank"] == 0 and write["pid"] == os.getpid() and write["length"] == 3
    seam = [(o.op, o.rank, os.path.basename(o.path)) for o in read_ops(log)]
    assert seam == [("create", 0, "f"), ("write", 0, "f"), ("fsync", 0, "f"), ("close", 0, "f"), ("rename", 0, "f")]
