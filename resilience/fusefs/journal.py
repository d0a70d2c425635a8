"""The two logs of a mount, both in its log folder.

- `fuse.jsonl`: every operation the file system carried out or refused, one JSON line each, with the
  calling process (`pid`), its `rank` (null: outside every rank) and, where they overlap, the fields of
  the seam's operation log (op, rank, seq, t, path, dst, thread, stream, offset, length). Extra fields:
  errno (a failure, injected or real), fault (the record that caused it), flags (of an open), modelled
  (false: crash states cannot replay it, see below). Read back by faults.fuse_log.read_log.
- `ops.rank<R>.jsonl` / `.bin`: the seam's operation log itself (faults.oplog.OpLog, bytes of every write
  included), written per rank, so faults.crash_states builds the disks a power loss can leave from a
  FUSE run exactly as from an in-process one. Callers outside every rank are written as rank NO_RANK.

Crash states know create (which truncates an existing file), write, fsync, fsync_dir, rename, exchange,
mkdir, unlink and rmtree. A hard link, a symlink, a truncate to a length other than 0, and writes to a
file that was already there before the mount and opened without O_TRUNC have no counterpart there: they
are done, and logged with modelled: false so a crash state built without them says so (power.py).

Paths are written as the writers saw them: the mount point joined with the path inside the mount.

The seam's log is written by a thread of its own, in the order the operations ran and with the times
they ran at: a write request returns once its bytes are on the backing file and copied for the log, and
the log's copy reaches its own file while the next request runs (the copy to the log's file was a third
of a logged write's time). At most PENDING records wait; a record the thread failed to write fails the
next operation and the unmount, so nothing is lost unsaid. The log is whole once the mount is gone."""

from __future__ import annotations

import errno as _errno
import os
import queue
import threading
import time

from ..faults.fuse_log import FUSE_LOG
from ..faults.oplog import OpLog, encode_line
from .words import NO_RANK, Caller

PENDING = 64  # records of the seam's log waiting for its thread, at most (64 MiB of 1 MiB writes)


class Journal:
    """Appends to both logs of one mount; a Journal with no folder keeps nothing but still names streams."""

    def __init__(self, folder: str | os.PathLike | None, mountpoint: str):
        self.folder = None if folder is None else os.path.abspath(str(folder))
        self.mountpoint = os.path.abspath(mountpoint)
        self._lock = threading.Lock()
        self._seq = 0
        self._streams = 0
        self._oplogs: dict[int, OpLog] = {}
        self._fd: int | None = None
        self._pending: queue.Queue = queue.Queue(PENDING)
        self._writer: threading.Thread | None = None
        self._failed: BaseException | None = None
        if self.folder is not None:
            os.makedirs(self.folder, exist_ok=True)
            self._fd = os.open(os.path.join(self.folder, FUSE_LOG), os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
            self._writer = threading.Thread(target=self._write_seam, name="fusefs-oplog", daemon=True)
            self._writer.start()

    def where(self, rel: str) -> str:
        """The path a writer used, from the path inside the mount ("/a/b")."""
        return self.mountpoint + rel if rel != "/" else self.mountpoint

    def new_stream(self) -> str:
        """A name for one open file, unique in the mount (the seam's `stream`)."""
        with self._lock:
            self._streams += 1
            return f"fuse:{self._streams}"

    def entry(
        self, op: str, caller: Caller, path: str, *, dst: str | None = None, error: int | None = None, **fields
    ) -> None:
        """One line of fuse.jsonl. `path`/`dst` are paths inside the mount; `error` an errno number."""
        if self._fd is None:
            return
        rec: dict = {
            "op": op,
            "rank": caller.rank,
            "pid": caller.tgid,
            "thread": caller.thread,
            "path": self.where(path),
        }
        if caller.pid != caller.tgid:
            rec["tid"] = caller.pid
        if dst is not None:
            rec["dst"] = self.where(dst)
        if error is not None:
            rec["errno"] = _errno.errorcode.get(error, str(error))
        for k, v in fields.items():
            if v is not None:
                rec[k] = v
        with self._lock:
            self._seq += 1
            rec["seq"], rec["t"] = self._seq, time.monotonic_ns()
            os.write(self._fd, (encode_line(rec) + "\n").encode())

    def seam(self, op: str, caller: Caller, path: str, *, dst: str | None = None, data=None, **fields) -> None:
        """One operation of the seam's log (faults.oplog vocabulary), under the caller's rank."""
        if self.folder is None:
            return
        rank = NO_RANK if caller.rank is None else caller.rank
        with self._lock:
            log = self._oplogs.get(rank)
            if log is None:
                log = self._oplogs[rank] = OpLog(self.folder, rank)
        if dst is not None:
            fields["dst"] = self.where(dst)
        if self._failed is not None:
            raise OSError(_errno.EIO, f"the operation log could not be written: {self._failed}")
        fields["t"] = time.monotonic_ns()  # when the operation ran, not when its record is written
        if data is not None:
            data = bytes(data)  # libfuse reuses the request's buffer once the request returns
        self._pending.put((log, op, self.where(path), data, caller.thread, fields))

    def _write_seam(self) -> None:
        while (record := self._pending.get()) is not None:
            log, op, path, data, thread, fields = record
            try:
                log.record(op, path, data=data, thread=thread, **fields)
            except Exception as e:  # said at the next operation and at the unmount
                self._failed = self._failed or e

    def close(self) -> None:
        """Write what waits, close both logs; raises OSError when a record of the seam's log was lost."""
        if self._writer is not None:
            self._pending.put(None)
            self._writer.join()
            self._writer = None
        with self._lock:
            for log in self._oplogs.values():
                log.close()
            self._oplogs.clear()
            if self._fd is not None:
                os.close(self._fd)
                self._fd = None
        if self._failed is not None:
            raise OSError(_errno.EIO, f"the operation log lost a record: {self._failed}")


__all__ = ["Journal"]
