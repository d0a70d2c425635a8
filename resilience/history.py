"""A case's history: every operation as invoke / ok / fail / info, recorded as it happens, merged, read.

As Jepsen keeps the history apart from the checkers that judge it and the pages that draw it, this module
is the one place a history is recorded (`EventLog`), merged (`merge_job`) and read (`read_events`): the
runner writes and merges it, the evidence builder (`runner/evidence.py`) and the timeline
(`report/timeline.py`) take the events it read, and nothing else parses history files.

Ranks append to their own file with unbuffered writes, so a SIGKILLed rank keeps every event it wrote;
the runner merges them into the case's history.jsonl after each job, and marks each invoke that never
completed as info (outcome unknown), as Jepsen does."""

from __future__ import annotations

import json
import os
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

# the types of an event, as Jepsen names them (FAILED, not FAIL: a verdict is FAIL, resilience.verdicts)
INVOKE, OK, FAILED, INFO = "invoke", "ok", "fail", "info"
HISTORY_FILE = "history.jsonl"  # a case folder's merged history


@dataclass
class Event:
    """One line of a history: `type` (invoke, ok, fail, info) of operation `f` by `process` in `job`."""

    type: str
    f: str
    process: Any  # rank number, or "runner" / "nemesis"
    value: dict = field(default_factory=dict)
    job: int = 0
    time: float = field(default_factory=time.time)

    def to_dict(self) -> dict:
        return {
            "time": round(self.time, 6),
            "job": self.job,
            "process": self.process,
            "type": self.type,
            "f": self.f,
            "value": self.value,
        }

    @classmethod
    def from_dict(cls, d: dict) -> Event:
        return cls(d["type"], d["f"], d["process"], d.get("value", {}), d.get("job", 0), d.get("time", 0.0))


class EventLog:
    """Append-only JSON lines; each event is one write() so a crash never leaves half an event."""

    def __init__(self, path: str, job: int = 0, process: Any = "runner"):
        self.path, self.job, self.process = path, job, process
        self._fd: int | None = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)

    def append(self, type_: str, f: str, **value) -> Event:
        e = Event(type_, f, self.process, _jsonable(value), self.job)
        self.write(e)
        return e

    def write(self, e: Event) -> None:
        if self._fd is None:
            raise ValueError(f"{self.path}: the event log is closed")
        os.write(self._fd, (json.dumps(e.to_dict(), sort_keys=True) + "\n").encode())

    def invoke(self, f: str, **value) -> Event:
        return self.append(INVOKE, f, **value)

    def ok(self, f: str, **value) -> Event:
        return self.append(OK, f, **value)

    def fail(self, f: str, **value) -> Event:
        return self.append(FAILED, f, **value)

    def info(self, f: str, **value) -> Event:
        return self.append(INFO, f, **value)

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None


def read_events(path: str) -> list[Event]:
    """The events of a history file, in the order they were written (none if it does not exist). A line
    that is not an event is dropped: one torn by a writer that died mid-write, or one that is not an
    object with a type, an operation and a process (and, if any, a value that is an object)."""
    out: list[Event] = []
    if not os.path.exists(path):
        return out
    with open(path, encoding="utf-8", errors="replace") as f:
        for line in f:
            try:
                e = Event.from_dict(json.loads(line))
            except (ValueError, KeyError, TypeError):
                continue
            if isinstance(e.value, dict):
                out.append(e)
    return out


def case_history(case_dir: str) -> list[Event]:
    """The merged history of a case folder (history.jsonl), read once."""
    return read_events(os.path.join(case_dir, HISTORY_FILE))


def rank_events(paths: Iterable[str], job: int, *, crash_state: str | None = None) -> list[Event]:
    """The events of one job's ranks (one file each, in rank order) in time order, ties in rank order, each
    stamped with the job and, if given, the crash state the job loaded."""
    events = sorted((e for path in paths for e in read_events(path)), key=lambda e: e.time)
    for e in events:
        e.job = job
        if crash_state:
            e.value["crash_state"] = crash_state
    return events


def merge_job(log: EventLog, events: list[Event], job: int, *, firings: Iterable[dict], why: str) -> None:
    """Append one job to the case's history: its ranks' events (`rank_events`), the fault firings of the job
    (the job they fired in explains its errors), then an info event for each invoke left open (`why`)."""
    for e in events:
        log.write(e)
    for rec in firings:
        log.write(Event(INFO, "fault", "runner", rec, job))
    for e in close_open_invokes(events, why):
        log.write(e)


def close_open_invokes(events: list[Event], why: str) -> list[Event]:
    """For each process, an invoke with no ok/fail after it becomes an info event (outcome unknown).
    Saves are told apart by their save id: an async save stays open while the next one is invoked."""
    open_: dict[tuple, Event] = {}
    for e in events:
        key = (e.job, e.process, e.f, e.value.get("save_id"))
        if e.type == INVOKE:
            open_[key] = e
        elif e.type in (OK, FAILED, INFO):
            open_.pop(key, None)
    return [Event(INFO, e.f, e.process, dict(e.value, outcome="unknown", why=why), e.job) for e in open_.values()]


def _jsonable(v):
    if isinstance(v, dict):
        return {str(k): _jsonable(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [_jsonable(x) for x in v]
    if isinstance(v, (str, int, float, bool)) or v is None:
        return v
    return str(v)


__all__ = [
    "FAILED",
    "HISTORY_FILE",
    "INFO",
    "INVOKE",
    "OK",
    "Event",
    "EventLog",
    "case_history",
    "close_open_invokes",
    "merge_job",
    "rank_events",
    "read_events",
]
