"""The FUSE file system's log of every operation it carried out or refused (`fuse.jsonl` in a mount's log
folder), read back. The file system (fusefs/journal.py) writes it; the timeline and the crash states' notes
read it here, below every layer that presents a case, so reading a log needs no file system."""

from __future__ import annotations

import os

from .firings import read_firings

FUSE_LOG = "fuse.jsonl"  # every operation, one JSON line each, in the log folder


def read_log(folder: str | os.PathLike) -> list[dict]:
    """Every line of a mount's fuse.jsonl, in order (a torn last line is skipped)."""
    return sorted(read_firings(os.path.join(str(folder), FUSE_LOG)), key=lambda r: r.get("seq", 0))


__all__ = ["FUSE_LOG", "read_log"]
