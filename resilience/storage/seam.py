"""Which filesystem checkpoint code goes through now: `current()`, the whole process's or a thread's own,
and `use(fs)` to route it through another (a fault injector, a recorder) for a while. Until something is
used, the plain local filesystem (storage.local)."""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator

from .base import FileSystem
from .local import LocalFileSystem

_current: FileSystem | None = None
_thread = threading.local()  # per-thread overrides, e.g. the async writer's recorder


def current() -> FileSystem:
    """The filesystem the calling thread's checkpoint code uses now."""
    global _current
    mine = getattr(_thread, "fs", None)
    if mine is not None:
        return mine
    if _current is None:
        _current = LocalFileSystem()
    return _current


@contextlib.contextmanager
def use(fs: FileSystem, *, this_thread: bool = False) -> Iterator[FileSystem]:
    """Route checkpoint I/O through `fs` for the duration: the whole process's (an injector), or only
    the calling thread's, so a background writer's wrapper never swaps the training thread's."""
    global _current
    if this_thread:
        before = getattr(_thread, "fs", None)
        _thread.fs = fs
        try:
            yield fs
        finally:
            _thread.fs = before
        return
    before = _current if _current is not None else current()
    _current = fs
    try:
        yield fs
    finally:
        _current = before
