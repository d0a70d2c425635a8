"""The history: every operation as invoke / ok / fail / info, appended as it happens.

Ranks append to their own file with unbuffered writes, so a SIGKILLed rank keeps every event it wrote;
the runner merges them into the run's history.jsonl after each job, and marks each invoke that never
completed as info (outcome unknown), as Jepsen does."""

from __future__ import annotations

import json
import os
import time
from dataclasses import dataclass, field
from typing import Any

INVOKE, OK, FAIL, INFO = "invoke", "ok", "fail", "info"


@dataclass
class Event:
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
        return self.append(FAIL, f, **value)

    def info(self, f: str, **value) -> Event:
        return self.append(INFO, f, **value)

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None


def read_events(path: str) -> list[Event]:
    """Events of a JSON-lines file; a torn last line (the writer died mid-write) is dropped."""
    out: list[Event] = []
    if not os.path.exists(path):
        return out
    with open(path, encoding="utf-8", errors="replace") as f:
        for line in f:
            try:
                out.append(Event.from_dict(json.loads(line)))
            except (ValueError, KeyError):
                continue
    return out


def close_open_invokes(events: list[Event], why: str) -> list[Event]:
    """For each process, an invoke with no ok/fail after it becomes an info event (outcome unknown).
    Saves are told apart by their save id: an async save stays open while the next one is invoked."""
    open_: dict[tuple, Event] = {}
    for e in events:
        key = (e.job, e.process, e.f, e.value.get("save_id"))
        if e.type == INVOKE:
            open_[key] = e
        elif e.type in (OK, FAIL, INFO):
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
