"""Collect (size, checksum) of every file a rank writes, from the streams themselves."""

from __future__ import annotations

import os

from .. import storage
from ..storage.buffered import BufferedStream
from .manifest import file_digest


class RecordingFileSystem:
    """Wraps the current filesystem; remembers each file written (and the folders holding them)."""

    def __init__(self, inner):
        self.inner = inner
        self.streams = []

    def open_write(self, path, *, sync=True):
        s = self.inner.open_write(path, sync=sync)
        self.streams.append(s)
        return BufferedStream(s)  # torch.save's small writes coalesce; every byte is written

    def __getattr__(self, name):
        return getattr(self.inner, name)

    def files(self, folder: str) -> dict[str, dict]:
        """relpath -> {size, xxh3_128} for files written under `folder`."""
        out = {}
        for s in self.streams:
            rel = os.path.relpath(s.path, folder)
            if rel.startswith(".."):
                continue
            if s.digest is None:  # the writer seeked: hash what landed
                size, digest = file_digest(s.path)
            else:
                size, digest = s.size, s.digest
            out[rel] = {"size": size, "xxh3_128": digest}
        return out


def recording():
    """Context manager: route this thread's writes through a recorder; yields it."""
    return storage.use(RecordingFileSystem(storage.current()), this_thread=True)
