"""Mount the faulty file system for the length of a job, and take it away on every exit path.

    with mounted(backing, mountpoint, faults=records, log=folder) as m:
        job = Job(...).start()
        m.set_ranks({r: pid for r, pid in enumerate(job.pids)})   # before the ranks write
        ...

`mounted` returns once the mount is live (libfuse's init ran and /proc/mounts shows it), and unmounts on
the way out, an exception or Ctrl-C included: fusermount3 -u, lazily (-z) when something still holds a
file open, then the server process is reaped (SIGKILLed if it hangs)."""

from __future__ import annotations

import contextlib
import functools
import multiprocessing as mp
import os
import shutil
import sys
import tempfile
import time
from collections.abc import Iterable, Iterator, Mapping
from multiprocessing.connection import Connection
from multiprocessing.process import BaseProcess

from ..errors import ConfigError, ResilienceError
from ..faults.base import faults_from
from ..faults.firings import read_firings
from ..faults.kinds import LostUnsyncedWrites
from .mounts import abort_connection, is_mounted, unmount
from .server import ServerConfig, serve
from .words import FIRINGS, STDERR

MOUNT_TIMEOUT = 30.0  # seconds for the mount to come up (a loaded 2-core machine forks slowly)
REPLY_TIMEOUT = 10.0  # seconds for the server to acknowledge a command
EXIT_TIMEOUT = 10.0  # seconds for the server to end once unmounted


class MountError(ResilienceError, OSError):
    """The file system could not be mounted; says why (libfuse's own words when it gave any)."""


def _inside(path: str, folder: str) -> bool:
    path, folder = os.path.abspath(path), os.path.abspath(folder)
    return path == folder or path.startswith(folder.rstrip("/") + "/")


class Mount:
    """One live mount: `mountpoint` shows `backing` through the faulty file system; `log` holds its logs."""

    def __init__(
        self,
        backing: str | os.PathLike,
        mountpoint: str | os.PathLike,
        *,
        ranks: Mapping[int, int] | None = None,
        faults: Iterable = (),
        log: str | os.PathLike | None = None,
        report: str | os.PathLike | None = None,
        arm_at: Iterable[int | None] | None = None,
        paths_as: str | os.PathLike | None = None,
        rank_env: str | None = None,
    ):
        self.rank_env = rank_env  # callers' ranks also read from this environment variable (RankMap)
        self.backing = os.path.abspath(str(backing))
        self.mountpoint = os.path.abspath(str(mountpoint))
        self.log = None if log is None else os.path.abspath(str(log))
        self.faults = faults_from(list(faults))
        self.arm_at = None if arm_at is None else list(arm_at)
        if self.arm_at is not None and len(self.arm_at) != len(self.faults):
            raise ConfigError(
                "arm_at",
                f"{len(self.arm_at)} arming points for {len(self.faults)} fault records",
                "give one per record (None: from the mount on)",
            )
        # the folder the logs and the faults' paths speak of: the runner names the backing folder, so crash
        # states, snapshots and layouts built on it read the log as they read the seam's
        self.paths_as = None if paths_as is None else os.path.abspath(str(paths_as))
        if report is None and self.log is not None:
            report = os.path.join(self.log, FIRINGS)
        self.report = None if report is None else os.path.abspath(str(report))
        self.ranks = {int(r): int(p) for r, p in (ranks or {}).items()}
        self._check()
        self.pid: int | None = None
        self._proc: BaseProcess | None = None
        self._commands: Connection | None = None
        self._events: Connection | None = None
        self._stderr: str | None = None
        self._own_stderr = False
        self.errors: list[str] = []  # what the server reported, or what unmounting said, if anything went wrong

    def _check(self) -> None:
        if not os.path.isdir(self.backing):
            raise ConfigError("backing", f"{self.backing} is not a folder")
        if not os.path.isdir(self.mountpoint):
            raise ConfigError("mountpoint", f"{self.mountpoint} is not a folder", "create it first")
        if _inside(self.backing, self.mountpoint) or _inside(self.mountpoint, self.backing):
            raise ConfigError(
                "mountpoint",
                f"{self.mountpoint} and the backing folder {self.backing} overlap",
                "the file system would serve itself",
            )
        for name, path in (("log", self.log), ("report", self.report)):
            if path is not None and _inside(path, self.mountpoint):
                raise ConfigError(
                    name,
                    f"{path} is inside the mount point",
                    "the file system would wait on itself; keep logs outside it",
                )
        if self.log is None and any(isinstance(f, LostUnsyncedWrites) for f in self.faults):
            raise ConfigError(
                "log",
                "lost_unsynced_writes needs the operation log",
                "pass log= so the crash states can be built from it",
            )

    # ---- start -----------------------------------------------------------------------------------
    def start(self, timeout: float = MOUNT_TIMEOUT) -> Mount:
        if self.log is not None:
            os.makedirs(self.log, exist_ok=True)
            self._stderr = os.path.join(self.log, STDERR)
        else:
            fd, self._stderr = tempfile.mkstemp(prefix="fusefs-", suffix=".stderr")
            os.close(fd)
            self._own_stderr = True
        ctx = mp.get_context("fork")
        child_commands, commands = ctx.Pipe(duplex=False)  # (reading end, writing end)
        events, child_events = ctx.Pipe(duplex=False)
        self._commands, self._events = commands, events
        cfg = ServerConfig(
            self.backing,
            self.mountpoint,
            faults=[f.to_dict() for f in self.faults],
            arm_at=self.arm_at,
            paths_as=self.paths_as,
            ranks=self.ranks,
            rank_env=self.rank_env,
            log=self.log,
            report=self.report,
            stderr=self._stderr,
            runner_pid=os.getpid(),
            runner_pgid=os.getpgid(0),
            runner_fds=(commands.fileno(), events.fileno()),
            stderr_is_temporary=self._own_stderr,
        )
        proc = self._proc = ctx.Process(
            target=serve, args=(cfg, child_commands, child_events), name="fusefs", daemon=True
        )
        proc.start()
        child_commands.close()
        child_events.close()
        self.pid = proc.pid
        try:
            self._wait_ready(timeout)
        except BaseException:
            self.unmount()
            raise
        return self

    def _wait_ready(self, timeout: float) -> None:
        assert self._proc is not None
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            msg = self._recv(min(0.2, max(0.0, deadline - time.monotonic())))
            if msg is not None and msg[0] == "ready":
                break
            if msg is not None and msg[0] == "error":
                raise MountError(f"cannot mount {self.mountpoint}: {msg[1]}{self._said()}")
            if msg is None and not self._proc.is_alive():
                raise MountError(
                    f"cannot mount {self.mountpoint}: the file system process exited with status "
                    f"{self._proc.exitcode}{self._said()}"
                )
        else:
            raise MountError(f"{self.mountpoint} was not mounted within {timeout:g} s{self._said()}")
        while not is_mounted(self.mountpoint):  # init runs once the kernel holds the mount; this is a formality
            if time.monotonic() > deadline:
                raise MountError(f"{self.mountpoint} does not show in /proc/mounts after libfuse's init")
            time.sleep(0.01)

    def _recv(self, timeout: float):
        try:
            if self._events is not None and self._events.poll(timeout):
                return self._events.recv()
        except (EOFError, OSError):
            time.sleep(timeout)  # the server is gone; the caller looks at the process
        return None

    def _said(self) -> str:
        try:
            with open(self._stderr or "", errors="replace") as f:
                text = f.read().strip()
        except OSError:
            return ""
        return f" (libfuse: {text[-2000:]})" if text else ""

    # ---- while mounted ---------------------------------------------------------------------------
    def set_ranks(self, ranks: Mapping[int, int]) -> None:
        """Attribute callers by this map (rank -> root pid) from now on; returns once it is in force."""
        self.ranks = {int(r): int(p) for r, p in ranks.items()}
        if self._commands is None:
            raise MountError(f"{self.mountpoint} is not mounted")
        self._commands.send(("ranks", self.ranks))
        deadline = time.monotonic() + REPLY_TIMEOUT
        while time.monotonic() < deadline:
            msg = self._recv(0.2)
            if msg is not None and msg[0] == "ranks":
                return
            if msg is not None and msg[0] == "error":
                self.errors.append(msg[1])
            if msg is None and (self._proc is None or not self._proc.is_alive()):
                break
        raise MountError(f"the file system of {self.mountpoint} did not take the rank map{self._said()}")

    def abort(self) -> None:
        """Fail every request waiting on this mount now (the kernel's connection is aborted); the mount
        stays until unmount() takes it away."""
        ok, why = abort_connection(self.mountpoint)
        if not ok:
            raise MountError(why)

    def firings(self) -> list[dict]:
        """What fired so far (faults.firings records, each with via: fuse)."""
        return read_firings(self.report)

    # ---- end ---------------------------------------------------------------------------------------
    def unmount(self) -> None:
        """Take the mount away and reap the server; safe to call twice, never raises for a busy mount
        (it is detached lazily) or a dead server (the mount is removed all the same)."""
        proc, self._proc = self._proc, None
        if proc is None:
            return
        try:
            if self._commands is not None:
                with contextlib.suppress(OSError, ValueError):
                    self._commands.send(("bye",))
            if is_mounted(self.mountpoint):
                ok, said = unmount(self.mountpoint)
                if not ok:
                    ok, said = unmount(self.mountpoint, lazy=True)
                if not ok:
                    self.errors.append(f"cannot unmount {self.mountpoint}: {said}")
            deadline = time.monotonic() + EXIT_TIMEOUT
            while proc.is_alive() and time.monotonic() < deadline:
                msg = self._recv(0.1)
                if msg is not None and msg[0] == "error":
                    self.errors.append(msg[1])
            if proc.is_alive():
                self.errors.append(f"the file system process {proc.pid} did not end once unmounted; killed")
                proc.kill()
                proc.join(EXIT_TIMEOUT)
            if proc.is_alive():  # a thread of it waits on a caller that waits on it: only an abort ends both
                ok, why = abort_connection(self.mountpoint)
                self.errors.append("its connection aborted" if ok else why)
            proc.join(EXIT_TIMEOUT)
            if is_mounted(self.mountpoint):  # a server that died left its mount behind ("not connected")
                unmount(self.mountpoint, lazy=True)
        finally:
            for conn in (self._commands, self._events):
                if conn is not None:
                    conn.close()
            self._commands = self._events = None
            if self._own_stderr and self._stderr:
                with contextlib.suppress(OSError):
                    os.unlink(self._stderr)


@contextlib.contextmanager
def mounted(
    backing: str | os.PathLike,
    mountpoint: str | os.PathLike,
    *,
    ranks: Mapping[int, int] | None = None,
    faults: Iterable = (),
    log: str | os.PathLike | None = None,
    report: str | os.PathLike | None = None,
    arm_at: Iterable[int | None] | None = None,
    paths_as: str | os.PathLike | None = None,
    rank_env: str | None = None,
    timeout: float = MOUNT_TIMEOUT,
) -> Iterator[Mount]:
    """Mount `backing` at `mountpoint` through the faulty file system for the block: `faults` (records or
    dicts, as a scenario gives them) carried out on callers attributed by `ranks` (rank -> root pid; also
    settable later with Mount.set_ranks, or told by each rank with base.tell), every operation logged to `log`
    (a folder outside the mount). `arm_at` and `paths_as`: see FuseInjector and Mount. `rank_env` (e.g.
    "RANK", as torchrun sets it): callers outside every root are also ranked by their environment
    (ranks.RankMap), so an unmodified torchrun job needs no rank map at all."""
    m = Mount(
        backing,
        mountpoint,
        ranks=ranks,
        faults=faults,
        log=log,
        report=report,
        arm_at=arm_at,
        paths_as=paths_as,
        rank_env=rank_env,
    )
    m.start(timeout)
    try:
        yield m
    finally:
        m.unmount()


@functools.lru_cache(maxsize=1)
def fuse_available() -> tuple[bool, str]:
    """(True, "") when this machine can mount the file system, else (False, why); tried once per process
    with a real mount of an empty folder."""
    if not sys.platform.startswith("linux"):
        return False, f"FUSE mounts are only used on Linux, not {sys.platform}"
    if not os.path.exists("/dev/fuse"):
        return False, "/dev/fuse does not exist (load the fuse module, or give the container the device)"
    try:
        os.close(os.open("/dev/fuse", os.O_RDWR))
    except OSError as e:
        return False, f"cannot open /dev/fuse: {e.strerror}"
    if shutil.which("fusermount3") is None:
        return False, "fusermount3 is not installed (apt-get install fuse3 libfuse3-3)"
    try:
        from .passthrough import mfusepy  # noqa: F401
    except ImportError:
        return False, "mfusepy is not installed (pip install mfusepy)"
    except OSError as e:  # mfusepy found no libfuse
        return False, f"libfuse is not installed (apt-get install fuse3 libfuse3-3): {e}"
    with tempfile.TemporaryDirectory(prefix="fusefs-probe-") as tmp:
        backing, mnt = os.path.join(tmp, "backing"), os.path.join(tmp, "mnt")
        os.mkdir(backing)
        os.mkdir(mnt)
        try:
            with mounted(backing, mnt, timeout=MOUNT_TIMEOUT):
                os.listdir(mnt)
        except (MountError, OSError) as e:
            return False, f"FUSE cannot mount here: {e}"
    return True, ""


__all__ = ["MOUNT_TIMEOUT", "Mount", "MountError", "fuse_available", "mounted"]
