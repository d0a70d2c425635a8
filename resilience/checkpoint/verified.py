"""The files of one checkpoint as a global load reads them: no byte of a listed file is parsed before its
size and checksum were checked (manifest.verify_file), and each file checked is read from disk once.

Each listed file has one owner (loading.readers), the rank that reads it on an unchanged topology.
`verify_owned()` reads and hashes this rank's files and keeps them in memory. It runs before the
collective after which any rank reads a file it does not own: the loader's own agreement, or the plan
step of a DCP reader (storage.dcp.SeamReader calls `before_reading`), whose collective carries a failed
check to every rank before any rank reads. A listed file opened before that (DCP's `.metadata` and
metadata.json, read by every rank while it plans) is checked by the rank that opens it. After it, a file
this rank does not own is read from disk: its owner checked it, and every rank agreed."""

from __future__ import annotations

import os
from typing import BinaryIO

from .. import storage
from ..errors import IntegrityError
from ..storage import base
from ..storage.held import HeldFiles, held_key
from .driver import describe
from .manifest import verify_file


class VerifiedFiles(HeldFiles):
    """A file system for the load of checkpoint folder `folder` with manifest file list `files`, of
    which this rank owns `owned` (relative paths). Everything else passes to `inner`."""

    def __init__(self, inner: base.FileSystem, folder: str, files: dict[str, dict], owned: list[str]) -> None:
        super().__init__(inner)
        self.folder = folder
        self.listed = files
        self.owned = sorted(owned)
        self._by_key = {held_key(os.path.join(folder, rel)): rel for rel in files}
        self.checked_owned = False
        self.problem: IntegrityError | None = None  # the first failed check on this rank

    def verify_owned(self) -> None:
        """Check every file this rank owns and hold its bytes; IntegrityError (naming the file and the
        check) at the first that fails. Once: a second call raises the same problem again, if any."""
        if not self.checked_owned:
            self.checked_owned = True
            for rel in self.owned:
                self._verify(rel)
        if self.problem is not None:
            raise self.problem

    def before_reading(self) -> None:
        self.verify_owned()

    def open_read(self, path: str) -> BinaryIO:
        key = held_key(path)
        rel = self._by_key.get(key)
        if rel is not None and key not in self.files and (not self.checked_owned or rel in self.owned):
            self._verify(rel)  # read before the agreement, or this rank's own: checked here, first
        if rel is not None and self.problem is not None:  # nothing more is read from a damaged checkpoint
            raise self.problem
        return super().open_read(path)

    def _verify(self, rel: str) -> None:
        path = os.path.join(self.folder, rel)
        if held_key(path) in self.files or self.problem is not None:
            return
        try:
            with storage.use(self.inner, this_thread=True):  # read the file itself, not through this
                data = verify_file(self.folder, rel, self.listed[rel], True)
        except IntegrityError as e:
            self.problem = e
            return
        except Exception as e:  # whatever failed, it is this file's check that failed
            self.problem = IntegrityError(path, "verify", describe(e))
            return
        if data is not None:
            self.hold(path, data)
