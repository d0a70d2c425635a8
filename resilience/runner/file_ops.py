"""Which files a case's ranks created, moved and removed, and who did: what the retention checker reads.

Every job through the storage seam keeps a small log of its own (`file_ops/jobN/rank<R>.jsonl`: one JSON
line per create, rename, exchange, unlink and rmtree, no bytes, written with os.write on an O_APPEND
descriptor as faults/oplog.py does, so a SIGKILL loses nothing logged); a job under the FUSE file system
has that file system's log (`fuse/jobN/fuse.jsonl`), read here too. Both become `checkers.FileOp`s."""

from __future__ import annotations

import json
import os
import threading
import time

from ..checkers import FileOp
from ..faults.fuse_log import read_log

FILE_OPS = "file_ops"  # the seam's logs, one folder per job, in the case folder
FUSE_LOGS = "fuse"  # the file system's (runner/io_route.FUSE_LOGS)
LOGGED = ("create", "rename", "exchange", "unlink", "rmtree")
_FUSE_OPS = {"create": "create", "rename": "rename", "exchange": "exchange", "unlink": "unlink", "rmdir": "rmtree"}


class FileOpRecorder:
    """A storage.FileSystem that logs the creates, renames and deletions going through it to `folder`."""

    def __init__(self, inner, folder: str, rank: int, job: int):
        self.inner, self.rank, self.job = inner, rank, job
        os.makedirs(folder, exist_ok=True)
        self._fd = os.open(os.path.join(folder, f"rank{rank}.jsonl"), os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)

    def _log(self, op: str, path, dst=None) -> None:
        rec = {
            "op": op,
            "path": os.path.abspath(str(path)),
            "rank": self.rank,
            "pid": os.getpid(),  # a forked writer inherits the recorder
            "thread": "main" if threading.current_thread() is threading.main_thread() else "writer",
            "thread_name": threading.current_thread().name,  # which of the rank's threads, for the culprits
            "time": time.time(),
            "job": self.job,
        }
        if dst is not None:
            rec["dst"] = os.path.abspath(str(dst))
        os.write(self._fd, (json.dumps(rec, separators=(",", ":")) + "\n").encode())

    def open_write(self, path: str, *, sync: bool = True):
        stream = self.inner.open_write(path, sync=sync)
        self._log("create", path)
        return stream

    def rename(self, src: str, dst: str) -> None:
        self.inner.rename(src, dst)
        self._log("rename", src, dst)

    def exchange(self, a: str, b: str) -> None:
        self.inner.exchange(a, b)
        self._log("exchange", a, b)

    def unlink(self, path: str) -> None:
        self.inner.unlink(path)
        self._log("unlink", path)

    def rmtree(self, path: str) -> None:
        self.inner.rmtree(path)
        self._log("rmtree", path)

    def __getattr__(self, name):  # reads, mkdir, fsyncs: as the wrapped filesystem does them
        return getattr(self.inner, name)

    def close(self) -> None:
        try:
            os.close(self._fd)
        except OSError:
            pass


def read_file_ops(case_dir: str, root: str) -> list[FileOp] | None:
    """Every logged operation under `root` (the case's checkpoint folder) in time order, paths relative to
    it; None when no job of the case kept a log."""
    seam, fuse = os.path.join(case_dir, FILE_OPS), os.path.join(case_dir, FUSE_LOGS)
    if not (os.path.isdir(seam) or os.path.isdir(fuse)):
        return None
    top = os.path.abspath(root)
    records = list(_seam_records(seam)) + list(_fuse_records(fuse))
    ops = []
    for r in records:
        path, dst = _inside(top, r.get("path")), _inside(top, r.get("dst")) if r.get("dst") else ""
        if path is None or dst is None:
            continue  # another folder (a crash state's copy) or the root itself
        rank = r.get("rank")
        ops.append(
            FileOp(r["op"], path, rank if isinstance(rank, int) and rank >= 0 else None, int(r.get("pid") or 0),
                   str(r.get("thread") or "main"), float(r["time"]), int(r.get("job", 0)), dst,
                   str(r.get("thread_name") or "")[:80])
        )  # fmt: skip
    return sorted(ops, key=lambda o: o.time)


def _seam_records(folder: str):
    for job_dir in sorted(os.listdir(folder)) if os.path.isdir(folder) else []:
        for name in sorted(os.listdir(os.path.join(folder, job_dir))):
            with open(os.path.join(folder, job_dir, name), "rb") as f:
                for line in f:
                    try:
                        yield json.loads(line)
                    except ValueError:
                        continue  # a torn last line


def _fuse_records(folder: str):
    """The file system's creates (and opens that truncate), renames and removals that succeeded, on the
    history's clock (its log keeps the monotonic one)."""
    to_wall = time.time() - time.monotonic()
    for job_dir in sorted(os.listdir(folder)) if os.path.isdir(folder) else []:
        job = int(job_dir[3:]) if job_dir.startswith("job") and job_dir[3:].isdigit() else 0
        for r in read_log(os.path.join(folder, job_dir)):
            op = _FUSE_OPS.get(r.get("op", ""))
            if op is None and r.get("op") == "open" and int(r.get("flags") or 0) & os.O_TRUNC:
                op = "create"
            if op is None and r.get("op") == "truncate" and r.get("length") == 0:
                op = "create"
            if op is None or r.get("errno") or "t" not in r:
                continue
            yield dict(r, op=op, time=r["t"] / 1e9 + to_wall, job=job)


def _inside(top: str, path) -> str | None:
    """`path` relative to `top`, or None when it is not inside it."""
    if not path:
        return None
    rel = os.path.relpath(os.path.abspath(str(path)), top)
    return None if rel == "." or rel.startswith("..") else rel


__all__ = ["FILE_OPS", "LOGGED", "FileOpRecorder", "read_file_ops"]
