"""The mount's own process: forked from the runner, it serves the file system until it is unmounted.

Forked, not spawned: the fault records are classes of resilience.faults, whose import pulls in torch
(seconds); the runner has it imported already. The records cross as JSON all the same (`Fault.to_dict`),
read back once by the injector, as on the ranks. The child leaves the runner's session at once (a Ctrl-C
at the terminal or a kill of the runner's group must not take the disk away from under a teardown), and
records the runner and its process group, which no crash may kill.

Two pipes talk to the runner. Commands come in (a new rank map, acknowledged once in force, so the
next write is attributed by it); events go out: ready (from libfuse's init, the mount is live), ranks
(acknowledgement), done, error. When the command pipe ends without an unmount (the runner died), the
process unmounts itself lazily and exits: a mount never outlives the run that made it for long."""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import threading
import time
from dataclasses import dataclass, field

from ..faults.firings import FaultReport
from .injector import FuseInjector
from .journal import Journal
from .mounts import unmount
from .ranks import RankMap
from .words import FSNAME, SUBTYPE

ORPHAN_GRACE = 5.0  # seconds a lazily unmounted file system waits for its last users before it exits
_ORPHANED = threading.Event()  # set once the runner died without unmounting


@dataclass
class ServerConfig:
    backing: str
    mountpoint: str
    faults: list[dict] = field(default_factory=list)  # records as JSON (Fault.to_dict); the injector reads them
    arm_at: list | None = None  # per record: the rank operation it counts from (injector)
    paths_as: str | None = None  # the folder logs and fault paths name (default: the mount)
    ranks: dict = field(default_factory=dict)  # rank -> root pid
    rank_env: str | None = None  # also read callers' ranks from this environment variable (ranks.RankMap)
    log: str | None = None  # folder of both logs
    report: str | None = None  # firings (faults.firings format)
    stderr: str | None = None  # where libfuse's own messages go
    stderr_is_temporary: bool = False  # a temp file of the runner's: removed if the runner dies
    runner_pid: int = 0
    runner_pgid: int = 0
    runner_fds: tuple[int, ...] = ()  # the runner's ends of the pipes, closed in the child


def serve(cfg: ServerConfig, commands, events) -> None:
    """Entry point of the forked child; never returns (os._exit, so the runner's atexit hooks stay the
    runner's)."""
    lock = threading.Lock()

    def send(msg) -> None:
        with lock:
            try:
                events.send(msg)
            except (OSError, ValueError):
                pass  # the runner is gone; the command pipe tells the control thread

    status = 1
    try:
        for fd in cfg.runner_fds:  # else the command pipe never ends when the runner dies
            os.close(fd)
        os.setsid()
        os.umask(0)  # the kernel has applied the caller's umask to every mode it sends
        for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
            signal.signal(sig, signal.SIG_DFL)  # not the runner's handlers; libfuse sets its own while mounted
        if cfg.stderr:
            fd = os.open(cfg.stderr, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
            os.dup2(fd, 2)
            os.close(fd)
            # a fresh object: no lock held over the fork; lives as long as the process
            sys.stderr = open(2, "w", buffering=1, closefd=False)  # noqa: SIM115
        from .binding import FaultyFUSE  # mfusepy loads libfuse on import
        from .passthrough import Passthrough

        ranks = RankMap(
            cfg.ranks,
            protected={cfg.runner_pgid, os.getpgid(0)},
            spared={cfg.runner_pid, os.getpid()},
            rank_env=cfg.rank_env,
        )
        injector = FuseInjector(cfg.faults, report=FaultReport(cfg.report) if cfg.report else None, arm_at=cfg.arm_at)
        journal = Journal(cfg.log, cfg.paths_as or cfg.mountpoint)
        ops = Passthrough(
            cfg.backing, ranks=ranks, injector=injector, journal=journal, on_ready=lambda: send(("ready", os.getpid()))
        )
        threading.Thread(target=_control, args=(ops, commands, send, cfg), name="fusefs-control", daemon=True).start()
        # no auto_unmount: its fusermount3 helper would race the runner's own unmount and clean_stale_mounts
        FaultyFUSE(
            ops,
            cfg.mountpoint,
            foreground=True,
            nothreads=False,
            default_permissions=True,
            fsname=FSNAME,
            subtype=SUBTYPE,
            hard_remove=True,
        )
        injector.close(ranks.roots)
        journal.close()
        send(("done", None))
        status = 0
    except BaseException as e:  # the runner reads why from the event pipe
        send(("error", f"{type(e).__name__}: {e}"))
    finally:
        if _ORPHANED.is_set() and cfg.stderr_is_temporary and cfg.stderr:  # its owner is gone: nobody else will
            with contextlib.suppress(OSError):
                os.unlink(cfg.stderr)
        os._exit(status)


def _control(ops, commands, send, cfg: ServerConfig) -> None:
    while True:
        try:
            msg = commands.recv()
        except (EOFError, OSError):
            break
        if msg[0] == "ranks":
            send(("ranks", ops.set_ranks(msg[1])))
        elif msg[0] == "bye":
            return  # the runner is unmounting; from here the loop's end is the process's end
    # the runner died without unmounting: detach the mount, let its last users finish, go
    _ORPHANED.set()
    unmount(cfg.mountpoint, lazy=True)
    time.sleep(ORPHAN_GRACE)
    if cfg.stderr_is_temporary and cfg.stderr:  # the runner that would have removed it is gone
        with contextlib.suppress(OSError):
            os.unlink(cfg.stderr)
    os._exit(1)


__all__ = ["ServerConfig", "serve"]
