"""The history now lives in `resilience.history` (below the runner, so the report's timeline reads it too);
these names stay importable from here for code written against the old place."""

from __future__ import annotations

from ..history import FAIL, INFO, INVOKE, OK, Event, EventLog, close_open_invokes, read_events

__all__ = ["FAIL", "INFO", "INVOKE", "OK", "Event", "EventLog", "close_open_invokes", "read_events"]
