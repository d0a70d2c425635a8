"""The process table, read without ever waiting: /proc/<pid>/status only.

/proc/<pid>/stat, which ps and psutil read, is held shut by the kernel while that process is in the middle
of an exec. An exec closes the close-on-exec descriptors, and closing a file of a file system that waits
(a FUSE mount answering slowly, or this project's own while it attributes the flush, a hung NFS server)
keeps it shut that long, and every reader with it: a teardown that scans the table through stat stalls
on any such process on the machine. status carries what a process tree needs and is never held."""

from __future__ import annotations

import os


def _fields(pid: int, wanted: tuple[bytes, ...]) -> dict[bytes, bytes] | None:
    """The `wanted` lines of /proc/<pid>/status (key -> value, stripped); None once the process is gone.

    Read with plain descriptors and searched for the wanted keys only: the FUSE file system asks this for
    every request it attributes, and a buffered file object and a split of all ~60 lines cost several
    times the read itself."""
    try:
        fd = os.open(f"/proc/{pid}/status", os.O_RDONLY | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        chunks = []
        while chunk := os.read(fd, _STATUS_READ):
            chunks.append(chunk)
    except OSError:
        return None
    finally:
        os.close(fd)
    text = b"\n" + b"".join(chunks)
    out = {}
    for key in wanted:
        at = text.find(b"\n" + key + b":")
        if at >= 0:
            start = at + len(key) + 2
            end = text.find(b"\n", start)
            out[key] = text[start : end if end >= 0 else len(text)].strip()
    return out


_STATUS_READ = 16384  # bytes per read: a whole status file (about 1.5 KiB) in one

_TREE_KEYS = (b"PPid", b"NSpgid", b"Tgid")


def status(pid: int) -> tuple[int, int, int] | None:
    """(parent pid, process group, process) of a process or thread (a zombie's too); None once it is gone."""
    fields = _fields(pid, _TREE_KEYS)
    if fields is None:
        return None
    try:  # NSpgid: the first is as this /proc sees it
        ppid, pgid, tgid = (int(fields[k].split()[0]) for k in _TREE_KEYS)
    except (KeyError, IndexError):  # a kernel older than 4.1 names no NSpgid
        return None
    return ppid, pgid, tgid


def state(pid: int) -> str | None:
    """The process's state letter (R, S, D, T stopped, t traced, Z zombie, ...); None once it is gone."""
    fields = _fields(pid, (b"State",))
    value = (fields or {}).get(b"State", b"").split()
    return value[0].decode() if value else None


def running(pid: int) -> bool:
    """Whether `pid` exists and is not a zombie (its exit is done; reaping it is its parent's business)."""
    return state(pid) not in (None, "Z", "X")


_SIGKILL_BIT = 1 << (9 - 1)


def doomed(pid: int) -> bool:
    """Whether `pid` is gone, a zombie, or has a SIGKILL pending: a process in the middle of a request to a
    FUSE file system waits for its answer even once SIGKILLed, and dies the moment it gets one."""
    fields = _fields(pid, (b"State", b"SigPnd", b"ShdPnd"))
    if fields is None or fields.get(b"State", b"")[:1] in (b"Z", b"X"):
        return True
    return any(int(fields.get(k) or b"0", 16) & _SIGKILL_BIT for k in (b"SigPnd", b"ShdPnd"))


def _pids() -> list[int]:
    try:
        return [int(name) for name in os.listdir("/proc") if name.isdigit()]
    except OSError:
        return []


def children(pid: int) -> list[int] | None:
    """The processes whose parent is `pid` (any of its threads), from /proc/<pid>/task/*/children: no
    walk over the whole table. [] once it is gone; None where the kernel keeps no such file."""
    try:
        tasks = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return []
    out: list[int] = []
    for tid in tasks:
        try:
            with open(f"/proc/{pid}/task/{tid}/children", "rb") as f:
                out += [int(c) for c in f.read().split()]
        except FileNotFoundError:
            if not os.path.exists(f"/proc/{pid}/task/{tid}"):
                continue  # the thread ended between the listing and the read
            return None  # a kernel built without CONFIG_PROC_CHILDREN
        except OSError:
            continue
    return out


def descendants(root: int) -> list[int]:
    """Every process below `root` (children first, then theirs), `root` itself left out."""
    out, todo = [], children(root)
    if todo is None:
        return _descendants_from_table(root)
    while todo:
        pid = todo.pop(0)
        out.append(pid)
        todo += children(pid) or []
    return out


def _descendants_from_table(root: int) -> list[int]:
    kids: dict[int, list[int]] = {}
    for pid in _pids():
        st = status(pid)
        if st is not None:
            kids.setdefault(st[0], []).append(pid)
    out, todo = [], list(kids.get(root, []))
    while todo:
        pid = todo.pop(0)
        out.append(pid)
        todo += kids.get(pid, [])
    return out


def group_members(pgid: int) -> list[int]:
    """Every process whose process group is `pgid`."""
    out = []
    for pid in _pids():
        st = status(pid)
        if st is not None and st[1] == pgid:
            out.append(pid)
    return out


__all__ = ["children", "descendants", "doomed", "group_members", "running", "state", "status"]
