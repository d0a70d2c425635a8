"""What fired: one JSON line per fired fault, written and fsynced before the process may kill itself, so the
runner can put every fault in the history, and a configured fault that never fired is UNPROBED, not a pass."""

from __future__ import annotations

import json
import os
import threading
import time
from collections.abc import Iterable

from ..verdicts import UNPROBED  # noqa: F401  (re-exported: the verdict a fault that never fired leaves)
from .base import Fault, fault_from_dict


def firing(fault: Fault, action: str, **detail) -> dict:
    """The record of one fired fault: which fault, what was done, and where (rank, file, offset, ...)."""
    out = {
        "kind": fault.kind,
        "layer": fault.layer,
        "fault": fault.to_dict(),
        "text": str(fault),
        "action": action,
        "pid": os.getpid(),
        "time": time.time(),
    }
    out.update({k: v for k, v in detail.items() if v is not None})
    return out


class FaultReport:
    """An append-only JSON-lines file of firings. Each line is one write(2) on an O_APPEND descriptor and
    is fsynced before append() returns, so ranks of one job can share the file and a SIGKILL right after
    loses nothing."""

    def __init__(self, path: str | os.PathLike):
        self.path = str(path)
        self._lock = threading.Lock()

    def append(self, record: dict) -> dict:
        line = (json.dumps(record, sort_keys=True, default=str) + "\n").encode()
        with self._lock:
            fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
            try:
                os.write(fd, line)
                os.fsync(fd)
            finally:
                os.close(fd)
        return record

    def read(self) -> list[dict]:
        return read_firings(self.path)


def read_firings(path: str | os.PathLike | None) -> list[dict]:
    """Every firing in a report file (none if it does not exist). A torn last line is skipped."""
    if path is None or not os.path.exists(path):
        return []
    out = []
    with open(path, "rb") as f:
        for line in f:
            try:
                out.append(json.loads(line))
            except ValueError:
                continue
    return out


def fired(fault: Fault, firings: Iterable[dict]) -> list[dict]:
    """The firings of one fault (records compare equal after a round trip through to_dict)."""
    out = []
    for rec in firings:
        try:
            if fault_from_dict(rec["fault"]) == fault:
                out.append(rec)
        except (KeyError, ValueError):
            continue
    return out


def unprobed(faults: Iterable[Fault], firings: Iterable[dict]) -> list[Fault]:
    """The configured faults that never fired: the run must say UNPROBED for them, never pass silently."""
    firings = list(firings)
    return [f for f in faults if not fired(f, firings)]
