"""Named points of a save, announced as they are reached, so a fault can strike exactly there."""

from __future__ import annotations

from collections.abc import Callable

# how a save's data files are written, most separate first: by a process the rank started, by a thread of
# the rank's process, in the rank's main thread (learned from a clean save's log, or declared by an adapter)
WRITER_KINDS = ("process", "thread", "inline")

PHASES = ("staging", "write", "manifest", "commit_rename", "tracker_update", "retention", "async_finalize")

_listeners: list[Callable[[str, dict], None]] = []


def reached(phase: str, **info) -> None:
    """Called by the checkpoint code just before it does `phase`."""
    for listener in list(_listeners):
        listener(phase, info)


def listen(fn: Callable[[str, dict], None]) -> Callable[[], None]:
    """Register a listener; returns a function that removes it."""
    _listeners.append(fn)
    return lambda: _listeners.remove(fn) if fn in _listeners else None
