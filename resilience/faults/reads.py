"""Which files a load reads, learned without the storage seam: Python raises the audit event "open" for
every `open()` and `os.open()` in the process (torch.load, DCP's reader, json, an adapter's own code), so
a hook sees each file a load opens, whoever wrote the code. Reads done in C++ without Python's open (none
in torch.load or DCP's file reader today) stay unseen; a load that does so learns nothing and every file
is kept as possibly read.

An audit hook cannot be removed: install it only in a process that ends after the load (a probe rank)."""

from __future__ import annotations

import os
import sys

_WRITE_MODES = set("wax+")


class ReadRecorder:
    """Records the files under `root` opened for reading while `recording` is set."""

    def __init__(self, root: str):
        self.root = os.path.realpath(root)
        self.recording = False
        self.paths: set[str] = set()
        sys.addaudithook(self._hook)

    def _hook(self, event: str, args: tuple) -> None:
        if not self.recording or event != "open" or not args:
            return
        path, mode, flags = (tuple(args) + (None, None))[:3]
        if isinstance(path, int) or path is None:
            return  # an fd, not a path
        if isinstance(mode, str) and _WRITE_MODES & set(mode):
            return
        if mode is None and isinstance(flags, int) and flags & os.O_ACCMODE != os.O_RDONLY:
            return
        try:
            real = os.path.realpath(os.fsdecode(path))
        except (TypeError, ValueError):
            return
        if real.startswith(self.root + os.sep):
            self.paths.add(os.path.relpath(real, self.root))
