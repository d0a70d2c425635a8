"""A rank's background writers, seen from outside: the processes a rank started that write its checkpoint.

A writer is a process below the rank (forked or spawned, at any depth) holding a file under the checkpoint
folder open for writing: it is told by what it does, not by its name. The other processes a rank starts
hold no checkpoint file and so are never taken for writers: multiprocessing's resource tracker and
forkserver, megatron-core's spawned Manager (its results queue), the launcher's guard, compile workers,
and DCP's checkpoint process between two saves (it waits on its pipe with no file open; it becomes a
writer again once it opens a file of the next save).

Command lines matter in one place: the top of a writer's tree. A writer may run below a helper (a
forkserver's children); a kill of the writer's tree stops below the helper, or it would take the helper
and everything else it serves. A rank that holds the file itself writes it in one of its own threads (or
its main thread): nothing there can be killed alone."""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass

import psutil

from .base import matches_path

# command-line marks of processes that serve a rank but never write for it (see the module docstring)
HELPERS = (
    "multiprocessing.resource_tracker",
    "multiprocessing.forkserver",
    "torch._inductor.compile_worker",
)
GUARD_SUFFIX = "-guard"


@dataclass(frozen=True)
class Holding:
    """A process holding a checkpoint file open for writing: its write position and the file's size."""

    pid: int
    path: str  # under the checkpoint root (a path seen through a mount point is given as under the root)
    position: int
    size: int

    @property
    def bytes(self) -> int:
        return max(self.position, self.size)


def holdings(pid: int, roots: Sequence[tuple[str, str]], pattern: str | None, min_bytes: int | None) -> list[Holding]:
    """The files `pid` holds open for writing under one of `roots` ((folder as the process sees it, the
    checkpoint root it stands for)), matching `pattern`, with at least `min_bytes` written."""
    try:
        files = psutil.Process(pid).open_files()
    except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
        return []
    out = []
    for f in files:
        if getattr(f, "mode", "w") == "r":  # a file it reads (a load, a previous checkpoint) is not written
            continue
        found = _under(f.path, roots)
        if found is None:
            continue
        path, rel = found
        if not matches_path(pattern, path, rel):
            continue
        try:
            size = os.stat(path).st_size
        except OSError:
            size = 0
        held = Holding(pid, path, f.position, size)
        if min_bytes is None or held.bytes >= min_bytes:
            out.append(held)
    return out


def _under(path: str, roots: Sequence[tuple[str, str]]) -> tuple[str, str] | None:
    """(the path under its checkpoint root, relative to it) for a path seen under one of `roots`."""
    for seen, root in roots:
        rel = os.path.relpath(path, seen)
        if not rel.startswith(".."):
            return os.path.join(root, rel), rel
    return None


def below(rank_pid: int) -> list[psutil.Process]:
    """Every process below the rank, at any depth (a rank that is gone has none)."""
    try:
        return psutil.Process(rank_pid).children(recursive=True)
    except (psutil.NoSuchProcess, psutil.ZombieProcess):
        return []


def is_helper(proc: psutil.Process) -> bool:
    """A process that serves the rank and never writes for it: a HELPERS command line, the launcher's guard
    (`rank<R>-guard` by resilience.launch: a shell whose $0 is that name, or a fork of the rank so named), or
    a child of the guard (its shell's `sleep`)."""
    try:
        parent = proc.parent()
    except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
        parent = None
    # a forkserver's children are not helpers: a writer may be one of them (writer_tree stops there)
    return _is_guard(proc) or (parent is not None and _is_guard(parent)) or _command_is_helper(proc)


def _is_guard(proc: psutil.Process) -> bool:
    try:
        return proc.name().endswith(GUARD_SUFFIX) or any(arg.endswith(GUARD_SUFFIX) for arg in proc.cmdline())
    except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
        return False


def _command_is_helper(proc: psutil.Process) -> bool:
    try:
        cmdline = " ".join(proc.cmdline())
    except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
        return False
    return any(mark in cmdline for mark in HELPERS)


def writer_tree(holder: int, rank_pid: int) -> list[int]:
    """The writer a holder belongs to, as the rank started it: the highest process above the holder that is
    below the rank and not below a helper, with every process under it (the holder first if it is the top)."""
    try:
        top = psutil.Process(holder)
        while True:
            parent = top.parent()
            if parent is None or parent.pid == rank_pid or is_helper(parent):
                break
            top = parent
        return [top.pid] + [p.pid for p in top.children(recursive=True)]
    except (psutil.NoSuchProcess, psutil.ZombieProcess):
        return [holder]


def describe(pid: int) -> str:
    """A process in a few words for a firing record: its pid and the start of its command line."""
    try:
        cmdline = " ".join(psutil.Process(pid).cmdline())
    except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
        return str(pid)
    return f"{pid} {cmdline[:120]}"


__all__ = ["HELPERS", "Holding", "below", "describe", "holdings", "is_helper", "writer_tree"]
