"""Words of the FUSE way in: the operations the file system logs, and which operation of the I/O seam
(resilience.faults.base.OPS) each one counts as when a fault record names `target.op`.

The file system sees finer operations than the seam: one `torch.save` is one seam write stream but
several FUSE write requests (up to the kernel's max_write each), and `close` is a flush per close(2)
plus one release. The mapping below is the single place that says how a record written for the seam is
read here, so one scenario step works either way:

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

FSNAME = "resilience-fusefs"  # the source column of /proc/mounts: how our mounts are told from others
SUBTYPE = "resilience"        # the type column reads fuse.resilience
FUSE_LOG = "fuse.jsonl"       # every operation, one JSON line each, in the log folder
FIRINGS = "firings.jsonl"     # what fired (faults.firings format), in the log folder unless given
STDERR = "fuse.stderr"        # libfuse's and mfusepy's own messages, in the log folder
# The seam-format operation log (faults.oplog: ops.rank<R>.jsonl / .bin) needs an integer rank: callers
# outside every rank (the runner, a copy made for a snapshot) are written under this one.
NO_RANK = -1

_SEAM = {"create": "create", "write": "write", "fsync": "fsync", "fdatasync": "fsync", "fsync_dir": "fsync_dir",
         "rename": "rename", "exchange": "exchange", "mkdir": "mkdir", "unlink": "unlink", "rmdir": "rmtree",
         "flush": "close"}


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


__all__ = ["Caller", "FIRINGS", "FSNAME", "FUSE_LOG", "NO_RANK", "STDERR", "SUBTYPE", "is_writable", "seam_op"]
