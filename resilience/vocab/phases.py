"""Named points of a save, announced as they are reached, so a fault can strike exactly there."""

from __future__ import annotations

from collections.abc import Callable

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
