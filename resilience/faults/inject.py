"""The in-process injector: a FileSystem that wraps the current one and carries out a rank's faults.

Installed per rank with `inject(...)` (storage.use under the hood, plus a phase listener). Which fault
fires on which operation is resilience.triggers' decision (as for every carrier); this module carries it
out on each operation of the seam, in order: slow it down, fail it with an errno, crash before it, do it
(a write maybe short, torn, or cut at a byte), log it, crash after it. Writes go through to the OS at once, so
the operation log and the file agree at any crash point. A crash is a real SIGKILL of the rank itself,
after the firing is fsynced to the report."""

from __future__ import annotations

import contextlib
import os
import signal
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Sequence

from .. import storage
from ..errors import ConfigError
from ..storage.base import WriteStreamBase
from ..triggers import FILE_EFFECTS, POWER_LOSS, Carries, Decision, Matcher, crash_action
from ..vocab import phases
from .base import KINDS, OPS, Fault, typed
from .firings import FaultReport, firing
from .oplog import OpLog

# Logged before they happen: a rank killed between the call and its record would leave a file the log
# never made, and no crash state could be built. A failed call cancels its record.
AHEAD = ("rename", "exchange")


def sigkill_self() -> None:
    """Die now, as a kernel OOM kill or a node failure would: no handler, no cleanup, no flush."""
    os.kill(os.getpid(), signal.SIGKILL)
    while True:  # the signal is delivered asynchronously; never return into the code under test
        time.sleep(1)


def _thread() -> str:
    return "main" if threading.current_thread() is threading.main_thread() else "writer"


class FaultyWriteStream(WriteStreamBase):
    """A WriteStream whose writes, fsync and close go through the injector."""

    def __init__(self, fs: FaultyFileSystem, inner, path: str, sync: bool, stream_id: str | None, armed: list[int]):
        self._fs, self.inner, self._path, self.sync = fs, inner, path, sync
        self.stream_id, self.armed = stream_id, armed
        self.closed = False

    size = property(lambda self: self.inner.size)
    digest = property(lambda self: self.inner.digest)

    @property
    def path(self) -> str:
        return self._path

    @path.setter
    def path(self, value: str) -> None:
        # DCP's seam re-points a stream at its file's new name after a rename; a recorder below us
        # holds the inner stream, so it must follow too
        self._path = value
        try:
            self.inner.path = value
        except AttributeError:
            pass

    def write(self, data) -> int:
        return self._fs._write(self, memoryview(data).cast("B"))

    def fsync(self) -> None:
        self._fs._run("fsync", (self.path,), self.inner.fsync, path=self.path, stream=self.stream_id)

    def close(self) -> None:
        if self.closed:
            return
        self.closed = True
        if self.sync:
            try:
                self.fsync()
            except Exception:  # a failed fsync still releases the file, as close(2) would
                with contextlib.suppress(Exception):
                    self.inner.close()
                raise
        self._fs._run("close", (self.path,), self.inner.close, path=self.path, stream=self.stream_id)

    def flush(self) -> None:
        self.inner.flush()

    def tell(self) -> int:
        return self.inner.tell()

    def seek(self, offset: int, whence: int = 0) -> int:
        return self.inner.seek(offset, whence)

    def fileno(self) -> int:
        return self.inner.fileno()

    def __getattr__(self, name):
        return getattr(self.inner, name)


class FaultyFileSystem:
    """Wraps a FileSystem; carries out the in-process faults aimed at `rank`, as resilience.triggers
    decides them. `kill` (default: SIGKILL this process) and `sleep` are injected so the logic can be
    tested in one process."""

    # every effect on a file, at a phase too (checkpoint code announces its phases in this process); no
    # effect on an object store's requests, which a proxy in front of its server carries
    CARRIES = Carries("seam", frozenset(FILE_EFFECTS), phases=True, ops=frozenset(OPS))

    def __init__(
        self,
        inner,
        faults: Iterable[Fault],
        *,
        rank: int = 0,
        report: FaultReport | None = None,
        oplog: OpLog | None = None,
        kill: Callable[[], None] = sigkill_self,
        sleep: Callable[[float], None] = time.sleep,
        arm_at: Sequence[int | None] | None = None,
    ):
        self.inner = inner
        self.rank = rank
        faults = list(faults)
        at = list(arm_at) if arm_at is not None else [None] * len(faults)
        keep = [
            i
            for i, f in enumerate(faults)
            if f.layer == "inject" and f.target.has_rank(rank) and self.CARRIES.carries(f)
        ]
        self.faults = [faults[i] for i in keep]
        self.report, self.oplog, self._kill, self._sleep = report, oplog, kill, sleep
        # a record with an arming point counts this rank's operations once it reached that op (reached())
        self.matcher = Matcher(self.faults, [at[i] for i in keep])
        self._fired: list[dict] = []
        self._lock = threading.RLock()

    # ---- bookkeeping ------------------------------------------------------------------------------
    def firings(self) -> list[dict]:
        """What fired in this process so far."""
        return list(self._fired)

    def _fire(self, i: int, action: str, **detail) -> dict:
        rec = firing(self.faults[i], action, rank=self.rank, thread=_thread(), **detail)
        with self._lock:
            self._fired.append(rec)
        self.matcher.fired(i, self.rank)
        if self.report is not None:
            self.report.append(rec)
        return rec

    def _die(self, i: int, **detail) -> None:
        self._fire(i, crash_action(self.faults[i]), **detail)
        self._kill()

    @staticmethod
    def _where(op: str, paths: tuple[str, ...]) -> dict:
        return {"op": op, "path": paths[0], **({"dst": paths[1]} if len(paths) > 1 else {})}

    def _before(self, op: str, paths: tuple[str, ...], length: int = 0) -> Decision:
        """Slow, fail with an errno, crash before: what the records decided for this operation."""
        d = self.matcher.operation(op, paths, rank=self.rank, thread=_thread(), length=length)
        where = self._where(op, paths)
        for slow in d.slow:
            if slow.first:
                self._fire(slow.index, "slow", delay=slow.delay, **where)
            self._sleep(slow.delay)
        if d.error is not None:
            e = d.error
            self._fire(e.index, f"raise {e.errno}", errno=e.errno, **where)
            raise OSError(e.code, f"{os.strerror(e.code)} (injected: {self.faults[e.index]})", paths[0])
        if d.crash is not None:
            self._die(d.crash, when="before", **where)
        return d

    def _after(self, op: str, paths: tuple[str, ...], d: Decision) -> None:
        i = self.matcher.after(d)
        if i is not None:
            self._die(i, when="after", **self._where(op, paths))

    def _run(self, op: str, paths: tuple[str, ...], do: Callable, **log):
        d = self._before(op, paths)
        if self.oplog is not None and op in AHEAD:
            with self.oplog.ahead(op, **log):
                result = do()
        else:
            result = do()
            if self.oplog is not None:
                self.oplog.record(op, **log)
        self._after(op, paths, d)
        return result

    # ---- phases ----------------------------------------------------------------------------------
    def on_phase(self, phase: str, info: dict) -> None:
        """vocab.phases listener: crash as the nth matching phase begins."""
        due = self.matcher.phase(phase, rank=self.rank, thread=_thread())
        if due is not None:
            self._die(due, phase=phase, **{k: v for k, v in info.items() if isinstance(v, (int, str))})

    # ---- writes ----------------------------------------------------------------------------------
    def _write(self, s: FaultyWriteStream, data: memoryview) -> int:
        n = len(data)
        offset = s.inner.tell()
        d = self._before("write", (s.path,), length=n)
        for p in d.partial:
            if not p.torn:
                self._fire(p.index, "short", path=s.path, offset=offset, length=n, kept=p.kept)
        keep, tear = d.kept(n), d.tear
        cut = self.matcher.cut(s.armed, offset, keep)  # crash once the file holds at_byte bytes
        if cut is not None:
            keep = cut[1]
        on_disk: bytes | memoryview = data[:keep]
        if tear is not None:
            s.inner.write(data)  # the stream hashes what the writer meant to write
            fill = tear.fill_bytes(n - tear.kept)
            s.inner.flush()
            os.pwrite(s.inner.fileno(), fill, offset + tear.kept)
            on_disk = bytes(data[: tear.kept]) + fill
            self._fire(tear.index, "torn", path=s.path, offset=offset, length=n, kept=tear.kept, fill=tear.fill)
        else:
            s.inner.write(on_disk)
        s.inner.flush()  # write through, so the log and the file agree at any crash point
        if self.oplog is not None:
            self.oplog.record("write", s.path, data=on_disk, stream=s.stream_id, offset=offset)
        if cut is not None:
            self._die(cut[0], op="write", path=s.path, offset=offset, bytes=offset + keep)
        self._after("write", (s.path,), d)
        return n if tear is not None else keep

    # ---- the FileSystem protocol ---------------------------------------------------------------------
    def open_write(self, path: str, *, sync: bool = True) -> FaultyWriteStream:
        path = str(path)
        d = self._before("create", (path,))
        sid = None
        if self.oplog is None:
            inner = self.inner.open_write(path, sync=False)  # the wrapper fsyncs at close, through the faults
        else:
            sid = self.oplog.new_stream()
            with self.oplog.ahead("create", path, stream=sid):
                inner = self.inner.open_write(path, sync=False)
        armed = self.matcher.open_write(path, rank=self.rank, thread=_thread())
        stream = FaultyWriteStream(self, inner, path, sync, sid, armed)
        at_once = self.matcher.at_open(armed)
        if at_once is not None:
            self._die(at_once, op="create", path=path, bytes=0)
        self._after("create", (path,), d)
        return stream

    def open_read(self, path: str):
        self._before("read", (str(path),))
        return self.inner.open_read(path)

    def rename(self, src: str, dst: str) -> None:
        self._run("rename", (str(src), str(dst)), lambda: self.inner.rename(src, dst), path=src, dst=dst)

    def exchange(self, a: str, b: str) -> None:
        self._run("exchange", (str(a), str(b)), lambda: self.inner.exchange(a, b), path=a, dst=b)

    def mkdir(self, path: str) -> None:
        path = os.path.abspath(str(path))
        d = self._before("mkdir", (path,))
        missing, p = [], path
        while p and not os.path.isdir(p):
            missing.append(p)
            parent = os.path.dirname(p)
            if parent == p:
                break
            p = parent
        self.inner.mkdir(path)
        if self.oplog is not None:
            for p in reversed(missing):
                self.oplog.record("mkdir", p)
        self._after("mkdir", (path,), d)

    def unlink(self, path: str) -> None:
        self._run("unlink", (str(path),), lambda: self.inner.unlink(path), path=path)

    def rmtree(self, path: str) -> None:
        existed = self.inner.exists(path)
        d = self._before("rmtree", (str(path),))
        self.inner.rmtree(path)
        if self.oplog is not None and existed:
            self.oplog.record("rmtree", path)
        self._after("rmtree", (str(path),), d)

    def fsync_dir(self, path: str) -> None:
        self._run("fsync_dir", (str(path),), lambda: self.inner.fsync_dir(path), path=path)

    def listdir(self, path: str) -> list[str]:
        return self.inner.listdir(path)

    def exists(self, path: str) -> bool:
        return self.inner.exists(path)

    def is_dir(self, path: str) -> bool:
        return self.inner.is_dir(path)

    def size(self, path: str) -> int:
        return self.inner.size(path)

    def __getattr__(self, name):  # anything else the wrapped filesystem offers
        return getattr(self.inner, name)

    # ---- end of injection ------------------------------------------------------------------------------
    def close(self) -> None:
        """A lost_unsynced_writes fault with no crash point fires here: power is lost after the last
        recorded operation (the process goes on; the runner builds the crash states)."""
        for i, _ in self.matcher.at_close([self.rank]):
            self._fire(i, "power_loss", when="after the last operation")
        if self.oplog is not None:
            self.oplog.close()


@contextlib.contextmanager
def inject(
    faults,
    *,
    rank: int,
    world: int | None = None,
    report: str | os.PathLike | None = None,
    oplog_dir: str | os.PathLike | None = None,
    kill: Callable[[], None] = sigkill_self,
    arm_at: Sequence[int | None] | None = None,
) -> Iterator[FaultyFileSystem]:
    """Carry out `faults` (Fault records) aimed at `rank` on this process's checkpoint I/O for the
    duration. Firings are appended to `report` (JSON lines, fsynced); operations to `oplog_dir`. With
    `arm_at`, record i counts only once the rank announced reaching operation arm_at[i] (matcher.reached)."""
    faults = typed(faults, world=world)
    mine = [f for f in faults if f.layer == "inject" and f.target.has_rank(rank)]
    for f in mine:
        if not FaultyFileSystem.CARRIES.carries(f):
            raise ConfigError(
                "fault.kind",
                f"the storage seam does not carry out {f.kind} (its effect: {f.effect})",
                FaultyFileSystem.CARRIES.describe(KINDS.values()),
            )
    if oplog_dir is None and any(f.effect == POWER_LOSS for f in mine):
        raise ConfigError(
            "oplog_dir",
            "lost_unsynced_writes needs the operation log",
            "pass oplog_dir so the crash states can be built from it",
        )
    fs = FaultyFileSystem(
        storage.current(),
        faults,
        rank=rank,
        report=FaultReport(report) if report is not None else None,
        oplog=OpLog(oplog_dir, rank) if oplog_dir is not None else None,
        kill=kill,
        arm_at=arm_at,
    )
    remove = phases.listen(fs.on_phase)
    try:
        with storage.use(fs):
            yield fs
    finally:
        remove()
        fs.close()
