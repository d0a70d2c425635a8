"""The system's side of a mount: is it mounted, take it away, and clear mounts an earlier run left.

Unmounting prefers fusermount3 (what libfuse mounted with, also usable without root) and falls back to a
lazy unmount (-z: detached now, gone once nothing uses it), then to umount(8), so an exit path never
leaves a mount in the tree for the next run to trip over."""

from __future__ import annotations

import errno
import os
import shutil
import subprocess

from .words import FSNAME

UNMOUNT_TIMEOUT = 10.0  # seconds for one fusermount3/umount call
FUSECTL = "/sys/fs/fuse/connections"


def _unescape(field: str) -> str:
    """/proc/mounts writes space, tab, newline and backslash as octal escapes."""
    for code, ch in (("\\040", " "), ("\\011", "\t"), ("\\012", "\n"), ("\\134", "\\")):
        field = field.replace(code, ch)
    return field


def fuse_mounts() -> list[tuple[str, str, str]]:
    """(source, mount point, type) of every FUSE mount this process can see."""
    out: list[tuple[str, str, str]] = []
    try:
        with open("/proc/self/mounts") as f:
            lines = f.read().splitlines()
    except OSError:
        return out
    for line in lines:
        parts = line.split()
        if len(parts) >= 3 and (parts[2] == "fuse" or parts[2].startswith("fuse.")):
            out.append((_unescape(parts[0]), _unescape(parts[1]), parts[2]))
    return out


def is_mounted(mountpoint: str | os.PathLike) -> bool:
    """Whether a FUSE file system is mounted exactly at `mountpoint`."""
    target = os.path.abspath(str(mountpoint))
    return any(mp == target for _, mp, _ in fuse_mounts())


def _run(argv: list[str]) -> tuple[int, str]:
    try:
        p = subprocess.run(argv, capture_output=True, text=True, timeout=UNMOUNT_TIMEOUT)
    except (OSError, subprocess.TimeoutExpired) as e:
        return 1, str(e)
    return p.returncode, (p.stderr or p.stdout).strip()


def unmount(mountpoint: str | os.PathLike, *, lazy: bool = False) -> tuple[bool, str]:
    """Unmount a FUSE mount: fusermount3 -u (with -z when `lazy`), else umount(8). (done, what was said)."""
    target = os.path.abspath(str(mountpoint))
    said = []
    tools = []
    if shutil.which("fusermount3"):
        tools.append(["fusermount3", "-u", *(["-z"] if lazy else []), target])
    if shutil.which("umount") and os.geteuid() == 0:
        tools.append(["umount", *(["-l"] if lazy else []), target])
    for argv in tools:
        code, text = _run(argv)
        if code == 0 or not is_mounted(target):
            return True, text
        said.append(f"{argv[0]}: {text}")
    return not is_mounted(target), "; ".join(said) or "no fusermount3 or umount to unmount with"


def _device(mountpoint: str) -> str | None:
    """The mount's device number (minor) as /proc/self/mountinfo gives it: stat() on a mount whose file
    system hangs would hang too."""
    try:
        with open("/proc/self/mountinfo") as f:
            lines = f.read().splitlines()
    except OSError:
        return None
    for line in reversed(lines):  # the newest mount at that point is the one seen
        parts = line.split()
        if len(parts) > 4 and _unescape(parts[4]) == mountpoint:
            return parts[2].partition(":")[2]
    return None


def abort_connection(mountpoint: str | os.PathLike) -> tuple[bool, str]:
    """Abort the kernel's connection to the file system of a mount (fusectl): every request waiting on it
    fails with ENOTCONN at once. The way out when the file system process cannot end because one of its
    threads waits on a caller that waits on it. (done, why not)."""
    target = os.path.abspath(str(mountpoint))
    minor = _device(target)
    if minor is None:
        return False, f"{target} is not mounted"
    if not os.path.isdir(os.path.join(FUSECTL, minor)) and os.geteuid() == 0:
        _run(["mount", "-t", "fusectl", "fusectl", FUSECTL])  # not mounted on every machine
    try:
        with open(os.path.join(FUSECTL, minor, "abort"), "w") as f:
            f.write("1")
    except OSError as e:
        return False, f"cannot abort the connection of {target} through {FUSECTL}: {e.strerror}"
    return True, ""


def _served(mountpoint: str) -> bool:
    """Whether a file system process still answers for the mount: a dead one leaves ENOTCONN behind."""
    try:
        os.stat(mountpoint)
    except OSError as e:
        return e.errno not in (errno.ENOTCONN, errno.ECONNABORTED)
    return True


def clean_stale_mounts(prefix: str | os.PathLike) -> list[str]:
    """Lazily unmount every mount of ours (source resilience-fusefs) at or under `prefix` whose file system
    process is gone (a run killed with it before it could unmount); live mounts of a run still going on are
    left alone. The mount points unmounted."""
    base = os.path.abspath(str(prefix))
    done = []
    for source, mp, _ in fuse_mounts():
        if source != FSNAME or not (mp == base or mp.startswith(base.rstrip("/") + "/")):
            continue
        if _served(mp):
            continue
        ok, _ = unmount(mp, lazy=True)
        if ok:
            done.append(mp)
    return done


__all__ = ["abort_connection", "clean_stale_mounts", "fuse_mounts", "is_mounted", "unmount"]
