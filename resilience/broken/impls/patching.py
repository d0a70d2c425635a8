"""What the broken implementations share: a patch undone on the way out, and a file system wrapper that
forwards what it does not override."""

from __future__ import annotations

import contextlib


@contextlib.contextmanager
def patched(obj, name: str, value):
    before = getattr(obj, name)
    setattr(obj, name, value)
    try:
        yield
    finally:
        setattr(obj, name, before)


class Forward:
    """A filesystem wrapper that forwards everything it does not override."""

    def __init__(self, inner):
        self.inner = inner

    def __getattr__(self, name):
        return getattr(self.inner, name)
