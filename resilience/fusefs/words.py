"""Words of the FUSE way in: the operations the file system logs, and which operation of the I/O seam
(resilience.faults.base.OPS) each one counts as when a fault record names `target.op`.

The file system sees finer operations than the seam: one `torch.save` is one seam write stream but
several FUSE write requests (up to the kernel's max_write each; binding.py says where they split), and
`close` is a flush per close(2) plus one release. The mapping below is the single place that says how a
record written for the seam is read here, so one scenario step works either way:

| FUSE operation                         | counts as   | why                                             |
|----------------------------------------|-------------|-------------------------------------------------|
| create; open for writing with O_TRUNC  | create      | the seam's open_write creates or truncates      |
| open read-only                         | read        | the seam's "read" is open_read: files, not requests |
| write (one request, up to max_write)   | write       |                                                 |
| fsync, fdatasync (of a file)           | fsync       |                                                 |
| fsync_dir                              | fsync_dir   |                                                 |
| rename; exchange (RENAME_EXCHANGE)     | rename; exchange |                                            |
| mkdir, unlink                          | mkdir, unlink |                                               |
| rmdir                                  | rmtree      | the seam's rmtree reaches the disk as rmdirs    |
| flush (every close(2))                 | close       | flush is what close(2) returns                  |
| read requests, release, link, symlink, | (none)      | never counted, so counts agree with the seam's  |
| truncate, other opens                  |             |                                                 |
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from ..faults.fuse_log import FUSE_LOG  # every operation, one JSON line each, in the log folder

FSNAME = "resilience-fusefs"  # the source column of /proc/mounts: how our mounts are told from others
SUBTYPE = "resilience"  # the type column reads fuse.resilience
FIRINGS = "firings.jsonl"  # what fired (faults.firings format), in the log folder unless given
STDERR = "fuse.stderr"  # libfuse's and mfusepy's own messages, in the log folder
# The seam-format operation log (faults.oplog: ops.rank<R>.jsonl / .bin) needs an integer rank: callers
# outside every rank (the runner, a copy made for a snapshot) are written under this one.
NO_RANK = -1

# Names a rank looks up (os.stat) at the mount's top to talk to the file system; none of them exists, the
# lookup is the message, and it returns only once the file system has taken it:
#   CONTROL + "rank.<R>"  the calling process is rank R's root (its children count as R's too)
#   CONTROL + "arm.<I>"   the calling rank begins its operation I (records armed there start counting)
CONTROL = ".resilience-control."


def control_path(mountpoint: str, what: str, number: int) -> str:
    return os.path.join(mountpoint, f"{CONTROL}{what}.{int(number)}")


def tell(mountpoint: str, what: str, number: int) -> None:
    """Send one control message (see CONTROL) from this process to the file system mounted at `mountpoint`."""
    try:
        os.stat(control_path(mountpoint, what, number))
    except FileNotFoundError:
        return  # the answer every control name gets
    raise OSError(f"{mountpoint} did not take the control message {what}.{number}: is the file system mounted?")


def parse_control(rel: str) -> tuple[str, int] | None:
    """("rank", R) or ("arm", I) for a control name ("/" + CONTROL + ...), None for any other path."""
    if not rel.startswith("/" + CONTROL):
        return None
    what, _, number = rel[len(CONTROL) + 1 :].partition(".")
    if what not in ("rank", "arm") or not number.isdigit():
        return None
    return what, int(number)


_SEAM = {
    "create": "create",
    "write": "write",
    "fsync": "fsync",
    "fdatasync": "fsync",
    "fsync_dir": "fsync_dir",
    "rename": "rename",
    "exchange": "exchange",
    "mkdir": "mkdir",
    "unlink": "unlink",
    "rmdir": "rmtree",
    "flush": "close",
}


def seam_op(op: str, flags: int = 0) -> str | None:
    """The seam operation (faults.base.OPS) a FUSE operation counts as; None when none does. `flags` are
    the open(2) flags of an open."""
    if op == "open":
        if flags & os.O_ACCMODE == os.O_RDONLY:
            return "read"
        return "create" if flags & os.O_TRUNC else None
    return _SEAM.get(op)


def is_writable(flags: int) -> bool:
    return flags & os.O_ACCMODE != os.O_RDONLY


@dataclass(frozen=True)
class Caller:
    """Who made a request: the thread id the kernel gave (fuse_get_context), its process, the rank whose
    process tree holds it (None: outside every rank) and which thread of its process it is ("main" or
    "writer", the seam's words for target.thread)."""

    pid: int
    tgid: int
    rank: int | None
    thread: str = "main"


__all__ = [
    "CONTROL",
    "Caller",
    "FIRINGS",
    "FSNAME",
    "FUSE_LOG",
    "NO_RANK",
    "STDERR",
    "SUBTYPE",
    "control_path",
    "is_writable",
    "parse_control",
    "seam_op",
    "tell",
]
