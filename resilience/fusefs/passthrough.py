"""A passthrough FUSE file system over a backing folder that logs every operation and carries out faults.

Built on mfusepy, the maintained successor of fusepy: a ctypes binding over the system's libfuse (2 or 3),
so it needs no compiler and no Python headers, only Debian's fuse3 / libfuse3-3; fusepy itself is
unmaintained and does not speak libfuse 3. binding.py's `FaultyFUSE` replaces the wrappers of it that drop
an argument we need or copy what they need not.

Multithreaded (libfuse's default loop), so a slowed rank does not stall the others. Each operation that
changes the disk runs under one lock from the fault decision to its log line, so the logs' order is the
order the backing folder saw; only a slow fault's sleep runs outside it. A file handle is the backing
file's descriptor. Unlinked files that are still open stay reachable (hard_remove: no .fuse_hidden
files in the backing folder or the logs). Metadata lookups (getattr, readdir, statfs) are not logged.

After a crash this file system drops the requests still in flight from the killed processes (they would
be operations after the crash point); after a power loss it refuses every change and every read with EIO:
the machine is off until the mount ends."""

from __future__ import annotations

import contextlib
import ctypes
import errno
import os
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field

import mfusepy

from ..faults.base import Fault
from ..launch.proctable import doomed
from ..triggers import POWER_LOSS, Decision, crash_action
from .injector import FuseInjector
from .journal import Journal
from .ranks import RankMap
from .words import Caller, is_writable, parse_control, seam_op

RENAME_NOREPLACE, RENAME_EXCHANGE = 1, 2
# Not passed to the backing file: the kernel sends every write at its offset (O_APPEND resolved), and a
# write request's buffer is not aligned as O_DIRECT wants (O_DIRECT promises no durability anyway).
_NOT_PASSED = os.O_APPEND | getattr(os, "O_DIRECT", 0)
_AT_FDCWD = -100
_STAT_KEYS = (
    "st_mode",
    "st_ino",
    "st_dev",
    "st_nlink",
    "st_uid",
    "st_gid",
    "st_size",
    "st_blocks",
    "st_blksize",
    "st_rdev",
)


@dataclass
class Handle:
    """An open file: its backing descriptor, the path it was opened by, and the seam stream its writes go to
    (None: read-only). `modelled` is False for a file that was there before the mount, opened without
    O_TRUNC: crash states cannot replay its writes."""

    fd: int
    rel: str
    opener: Caller
    stream: str | None = None
    modelled: bool = True
    synced: bool = False  # O_SYNC / O_DSYNC: each write is durable when it returns
    # read-only: the stream of the file this mount made that it opens; an fsync through it syncs that file
    # (Linux syncs the inode, whichever descriptor asks: a job may fsync a file it opened again to read)
    reads: str | None = None
    armed: list[int] = field(default_factory=list)  # at_byte crash faults armed by this open


@dataclass
class _Doing:
    caller: Caller
    plan: Decision
    paths: tuple[str, ...]
    seam: str | None
    crashed: bool = False


def _renameat2(src: str, dst: str, flags: int) -> None:
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.renameat2(_AT_FDCWD, os.fsencode(src), _AT_FDCWD, os.fsencode(dst), flags) != 0:
        err = ctypes.get_errno()
        raise OSError(err, os.strerror(err), src)


HOLD_SLICE = 0.05  # seconds between two looks at a held caller


def _hold(delay: float, pid: int) -> None:
    """Sleep `delay` seconds, or less once the caller is SIGKILLed (it dies the moment it is answered, and
    an unmount waits for this thread)."""
    end = time.monotonic() + delay
    while (left := end - time.monotonic()) > 0 and not doomed(pid):
        time.sleep(min(HOLD_SLICE, left))


def _asked(op: str, flags: int, length: int, offset: int | None) -> dict:
    """What a refused or failed request asked for, as its log line says it."""
    return {"flags": flags or None, "offset": offset, "length": length if op == "write" else None}


def _pwrite_all(fd: int, data: bytes | memoryview, offset: int) -> None:
    view = memoryview(data)
    while view:
        n = os.pwrite(fd, view, offset)
        view, offset = view[n:], offset + n


class Passthrough(mfusepy.Operations):
    """The operations of one mount. `ranks` attributes callers, `injector` decides faults, `journal` logs."""

    use_ns = True  # times as integer nanoseconds, as os.stat gives them

    def __init__(self, backing: str, *, ranks: RankMap, injector: FuseInjector, journal: Journal, on_ready=None):
        self.backing = os.path.abspath(backing)
        self.ranks, self.injector, self.journal = ranks, injector, journal
        self.on_ready = on_ready
        self.down = False  # a power loss happened: the machine is off
        self._lock = threading.RLock()
        self._handles: dict[int, Handle] = {}
        self._dirs: set[int] = set()
        self._inodes: dict[tuple[int, int], str] = {}  # file -> the stream of the create that made or emptied it
        self._killed: set[int] = set()  # processes this file system killed
        self._dead: set[int] = set()  # ranks this file system killed

    # ---- plumbing ------------------------------------------------------------------------------
    def init(self, path) -> None:
        if self.on_ready is not None:
            self.on_ready()

    def set_ranks(self, roots) -> int:
        with self._lock:
            self._dead.clear()
            self._killed.clear()
            return self.ranks.update(roots)

    def _told(self, what: str, number: int) -> None:
        """A control message (base.CONTROL) from the calling process."""
        if what == "rank":
            with self._lock:
                self.ranks.add(number, self._caller().tgid)
                self._dead.discard(number)  # a new process of a rank killed before (a restart) may write again
            return
        caller = self._caller()
        if caller.rank is not None:
            self.injector.reached(caller.rank, number)

    def _real(self, rel: str | None) -> str:
        if rel is None:
            raise OSError(errno.ENOENT, "no path (an unlinked file)")
        return self.backing + rel if rel != "/" else self.backing

    def _caller(self) -> Caller:
        return self.ranks.caller(mfusepy.fuse_get_context()[2])

    def _refuse(self, caller: Caller) -> None:
        if self.down:
            raise OSError(errno.EIO, "power lost (injected)")
        if caller.tgid in self._killed or (
            caller.rank in self._dead and self.ranks.roots.get(caller.rank) in self._killed
        ):  # a rank whose root was killed, until a new process of it is its root (told, or seen in its environment)
            raise OSError(errno.EIO, "the calling rank was killed (injected)")

    def _crash(self, caller: Caller, fault: Fault, rel: str) -> None:
        """Kill the calling rank (a power loss: every rank, and the disk stops); its firing is already written."""
        power = fault.effect == POWER_LOSS
        self.journal.entry("power_loss" if power else "sigkill", caller, rel, fault=str(fault))
        if power:
            self.down = True
        ranks = sorted(self.ranks.roots) if power else [caller.rank] if caller.rank is not None else []
        for rank in ranks:
            killed = self.ranks.kill(rank)
            if killed:  # nothing is killed for a rank that is the runner itself (ranks.RankMap: spared)
                self._dead.add(rank)
                self._killed.update(killed)

    @contextlib.contextmanager
    def _op(
        self, op: str, rel: str, dst: str | None = None, *, flags: int = 0, length: int = 0, offset: int | None = None
    ) -> Iterator[_Doing]:
        """Run one operation as the seam does: slow, fail, crash before, do (the block), crash after. The
        block logs what it did; a failure it raises is logged here."""
        caller = self._caller()
        self._refuse(caller)
        seam = seam_op(op, flags)
        paths = (self.journal.where(rel),) + ((self.journal.where(dst),) if dst is not None else ())
        plan = self.injector.before(caller, seam, paths, length=length, offset=offset)
        if plan.delay:
            _hold(plan.delay, caller.tgid)  # outside the lock: a straggler stalls only itself
            if doomed(caller.tgid):  # killed from outside while held: its request dies with it, undone
                self.journal.entry(
                    op, caller, rel, dst=dst, error=errno.EINTR, died="while held", **_asked(op, flags, length, offset)
                )
                raise OSError(errno.EINTR, "the caller died while its request was held (injected slow)")
        with self._lock:
            self._refuse(caller)  # killed while it slept
            if plan.error is not None:
                code, fault = plan.error.code, self.injector.faults[plan.error.index]
                self.journal.entry(
                    op, caller, rel, dst=dst, error=code, fault=str(fault), **_asked(op, flags, length, offset)
                )
                raise OSError(code, f"{os.strerror(code)} (injected: {fault})")
            if plan.crash is not None:
                self._crash(caller, self.injector.faults[plan.crash], rel)
                raise OSError(errno.EIO, "killed before the operation (injected)")
            doing = _Doing(caller, plan, paths, seam)
            try:
                yield doing
            except OSError as e:
                self.journal.entry(op, caller, rel, dst=dst, error=e.errno, **_asked(op, flags, length, offset))
                raise
            if not doing.crashed:
                crash = self.injector.after(caller, seam, paths, plan)
                if crash is not None:
                    self._crash(caller, crash, rel)

    # ---- metadata, never logged ------------------------------------------------------------------
    def getattr(self, path, fh=None):
        message = parse_control(path) if fh is None else None
        if message is not None:
            self._told(*message)
            raise OSError(errno.ENOENT, "a control name")  # never cached: libfuse's negative timeout is 0
        if fh is not None and (fh in self._handles or fh in self._dirs):
            st = os.fstat(fh)
        else:
            st = os.lstat(self._real(path))
        out = {k: getattr(st, k) for k in _STAT_KEYS}
        out.update(st_atime=st.st_atime_ns, st_mtime=st.st_mtime_ns, st_ctime=st.st_ctime_ns)
        return out

    def readdir(self, path, fh):
        return [".", "..", *os.listdir(self._real(path))]

    def readlink(self, path):
        return os.readlink(self._real(path))

    def statfs(self, path):
        sv = os.statvfs(self._real(path))
        return {
            k: getattr(sv, k)
            for k in (
                "f_bsize",
                "f_frsize",
                "f_blocks",
                "f_bfree",
                "f_bavail",
                "f_files",
                "f_ffree",
                "f_favail",
                "f_flag",
                "f_namemax",
            )
        }

    def chmod(self, path, mode):
        os.chmod(self._real(path), mode)

    def chown(self, path, uid, gid):
        os.chown(self._real(path), uid, gid, follow_symlinks=False)

    def utimens(self, path, times=None):
        if times is None:
            os.utime(self._real(path), follow_symlinks=False)
        else:
            os.utime(self._real(path), ns=(int(times[0]), int(times[1])), follow_symlinks=False)

    def opendir(self, path):
        fd = os.open(self._real(path), os.O_RDONLY | os.O_DIRECTORY)
        self._dirs.add(fd)
        return fd

    def releasedir(self, path, fh):
        self._dirs.discard(fh)
        os.close(fh)

    # ---- the folder's entries -----------------------------------------------------------------------
    def mkdir(self, path, mode):
        with self._op("mkdir", path) as d:
            os.mkdir(self._real(path), mode)
            self.journal.entry("mkdir", d.caller, path, mode=mode)
            self.journal.seam("mkdir", d.caller, path)

    def rmdir(self, path):
        with self._op("rmdir", path) as d:
            os.rmdir(self._real(path))
            self.journal.entry("rmdir", d.caller, path)
            self.journal.seam("rmtree", d.caller, path)  # an empty folder: the seam's rmtree of it

    def unlink(self, path):
        with self._op("unlink", path) as d:
            os.unlink(self._real(path))
            self.journal.entry("unlink", d.caller, path)
            self.journal.seam("unlink", d.caller, path)

    def rename(self, old, new, flags=0):
        op = "exchange" if flags & RENAME_EXCHANGE else "rename"
        with self._op(op, old, new) as d:
            if flags:
                _renameat2(self._real(old), self._real(new), flags)
            else:
                os.rename(self._real(old), self._real(new))
            self.journal.entry(op, d.caller, old, dst=new, flags=flags or None)
            self.journal.seam(op, d.caller, old, dst=new)

    def link(self, target, source):
        with self._op("link", source, target) as d:
            os.link(self._real(source), self._real(target))
            self.journal.entry("link", d.caller, source, dst=target, modelled=False)

    def symlink(self, target, source):
        with self._op("symlink", target) as d:
            os.symlink(source, self._real(target))
            self.journal.entry("symlink", d.caller, target, value=source, modelled=False)

    # ---- open files ----------------------------------------------------------------------------------
    @staticmethod
    def _bind(st: os.stat_result) -> tuple[int, int]:
        return st.st_dev, st.st_ino

    def _opened(self, d: _Doing, fd: int, path: str, op: str, flags: int, created: bool) -> int:
        """Log an open that succeeded and keep its handle; arm at_byte crashes on an open for writing."""
        h = Handle(fd, path, d.caller, synced=bool(flags & (os.O_SYNC | os.O_DSYNC)))
        if not is_writable(flags):
            h.reads = self._inodes.get(self._bind(os.fstat(fd))) if self._inodes else None
        else:
            inode = self._bind(os.fstat(fd))
            if created or flags & os.O_TRUNC:
                h.stream = self.journal.new_stream()
                self._inodes[inode] = h.stream
            else:  # a file this mount made or emptied keeps its stream; one from before the mount has none
                h.stream = self._inodes.get(inode)
                h.modelled = h.stream is not None
                h.stream = h.stream or self.journal.new_stream()
        self._handles[fd] = h
        self.journal.entry(op, d.caller, path, flags=flags, stream=h.stream)
        if h.stream is not None and (created or flags & os.O_TRUNC):
            self.journal.seam("create", d.caller, path, stream=h.stream)
        if is_writable(flags):
            h.armed = self.injector.arm(d.caller, d.paths[0])
            i = self.injector.at_open(h.armed)
            if i is not None:  # a crash at byte 0: the file exists, empty
                f = self.injector.faults[i]
                self.injector.fire(i, d.caller, crash_action(f), op=op, path=d.paths[0], bytes=0)
                self._crash(d.caller, f, path)
                d.crashed = True
        return fd

    def create(self, path, mode, flags):
        with self._op("create", path, flags=flags) as d:
            fd = os.open(self._real(path), (flags | os.O_CREAT) & ~_NOT_PASSED, mode)
            return self._opened(d, fd, path, "create", flags, created=True)

    def open(self, path, flags):
        # the kernel sends writes at their offsets (O_APPEND included) and has already resolved O_CREAT
        flags &= ~(os.O_CREAT | os.O_EXCL)
        with self._op("open", path, flags=flags) as d:
            fd = os.open(self._real(path), flags & ~_NOT_PASSED)
            return self._opened(d, fd, path, "open", flags, created=False)

    def read(self, path, size, offset, fh):
        caller = self._caller()
        if self.down:
            raise OSError(errno.EIO, "power lost (injected)")
        data = os.pread(fh, size, offset)
        h = self._handles.get(fh)
        self.journal.entry("read", caller, path or (h.rel if h else "/"), offset=offset, length=len(data))
        return data

    def write(self, path, data, offset, fh):
        h = self._handles[fh]
        path = path or h.rel
        n = len(data)
        with self._op("write", path, length=n, offset=offset) as d:
            keep, tear = d.plan.kept(n), d.plan.tear
            on_disk = data if keep >= n else data[:keep]  # `data` is a view (binding.py): slices copy nothing
            if tear is not None:
                on_disk = bytes(data[: tear.kept]) + tear.fill_bytes(n - tear.kept)
            cut = self.injector.cut(h.armed, offset, len(on_disk))
            if cut is not None:
                on_disk = on_disk[: cut[1]]
            _pwrite_all(fh, on_disk, offset)
            self.journal.entry(
                "write",
                d.caller,
                path,
                stream=h.stream,
                offset=offset,
                length=len(on_disk),
                synced=h.synced or None,
                modelled=None if h.modelled else False,
            )
            if h.modelled:
                self.journal.seam("write", d.caller, path, data=on_disk, stream=h.stream, offset=offset)
                if h.synced:  # durable as it returns: to crash states, a write followed by its fsync
                    self.journal.seam("fsync", d.caller, path, stream=h.stream)
            if cut is not None:
                crash = self.injector.faults[cut[0]]
                self.injector.fire(
                    cut[0],
                    d.caller,
                    crash_action(crash),
                    op="write",
                    path=d.paths[0],
                    offset=offset,
                    bytes=offset + len(on_disk),
                )
                self._crash(d.caller, crash, path)
                d.crashed = True
                return len(on_disk)
            return n if tear is not None else len(on_disk)  # a torn write says it wrote everything

    def truncate(self, path, length, fh=None):
        h = self._handles.get(fh) if fh is not None else None
        path = path or (h.rel if h else None)
        with self._op("truncate", path or "/") as d:
            if h is not None:
                os.ftruncate(h.fd, length)
                inode = self._bind(os.fstat(h.fd))
            else:
                os.truncate(self._real(path), length)
                inode = self._bind(os.stat(self._real(path)))
            if length == 0:  # emptied: the seam's create of an existing file; later writes replay against it
                stream = h.stream if h is not None and h.stream is not None else self.journal.new_stream()
                if h is not None:
                    h.stream, h.modelled = stream, True
                self._inodes[inode] = stream
                self.journal.entry("truncate", d.caller, path or "/", length=0, stream=stream)
                self.journal.seam("create", d.caller, path or "/", stream=stream)
            else:
                self.journal.entry("truncate", d.caller, path or "/", length=length, modelled=False)

    def flush(self, path, fh):
        h = self._handles.get(fh)
        caller = self._caller()
        if caller.tgid in self._killed or self.down:
            return 0  # a killed process closing its files on the way out
        with self._op("flush", path or (h.rel if h else "/")) as d:
            self.journal.entry("flush", d.caller, path or (h.rel if h else "/"), stream=h.stream if h else None)

    def release(self, path, fh):
        h = self._handles.pop(fh, None)
        os.close(fh)
        if h is None or self.down:
            return
        caller = self._caller()
        if caller.pid == 0:  # the kernel releases after the last close, often from no process: the opener's
            caller = h.opener
        with self._lock:
            self.journal.entry("release", caller, path or h.rel, stream=h.stream)
            if h.stream is not None and h.modelled:
                self.journal.seam("close", caller, path or h.rel, stream=h.stream)

    def fsync(self, path, datasync, fh):
        h = self._handles.get(fh)
        path = path or (h.rel if h else "/")
        op = "fdatasync" if datasync else "fsync"
        with self._op(op, path) as d:
            (os.fdatasync if datasync else os.fsync)(fh)
            modelled = h is None or h.modelled
            stream = (h.stream or h.reads) if h else None
            self.journal.entry(op, d.caller, path, stream=stream, modelled=None if modelled else False)
            if stream is not None and h is not None and h.modelled:
                self.journal.seam("fsync", d.caller, path, stream=stream)

    def fsyncdir(self, path, datasync, fh):
        path = path or "/"
        with self._op("fsync_dir", path) as d:
            (os.fdatasync if datasync else os.fsync)(fh)
            self.journal.entry("fsync_dir", d.caller, path, datasync=datasync or None)
            self.journal.seam("fsync_dir", d.caller, path)


__all__ = ["Handle", "Passthrough", "RENAME_EXCHANGE", "RENAME_NOREPLACE"]
