"""Plain POSIX files: fsync on close, atomic rename, directory fsync, atomic exchange on Linux."""

from __future__ import annotations

import ctypes
import errno
import os
import shutil
import sys
from typing import BinaryIO

import xxhash

from .base import WriteStreamBase
from .contained import open_regular

HASH_PIECE = 256 << 10
_RENAME_EXCHANGE = 2
_AT_FDCWD = -100


class LocalWriteStream(WriteStreamBase):
    """A file open for writing that hashes what it writes, so checksums cost no second read."""

    def __init__(self, path: str, sync: bool = True):
        self.path = path
        self.sync = sync
        self._f = open(path, "wb")  # noqa: SIM115 (the stream owns the file; close() closes it)
        self._hash = xxhash.xxh3_128()
        self._seeked = False
        self._at = 0  # the file position, kept here: tell() on every small write costs more than the write
        self.size = 0
        self.digest: str | None = None
        self.closed = False

    def write(self, data) -> int:
        view = memoryview(data)
        if view.format != "B" or view.ndim != 1:
            view = view.cast("B")
        if len(view) <= HASH_PIECE:  # torch.save's many small records: one call, no loop
            n = self._f.write(view)
            n = len(view) if n is None else n
            if not self._seeked:
                self._hash.update(view[:n] if n < len(view) else view)
            self._at += n
            self.size = max(self.size, self._at)
            return n
        done = 0
        # in pieces that stay in the cpu cache between the write's copy and the hash: 3x cheaper hashing
        for at in range(0, len(view), HASH_PIECE):
            piece = view[at : at + HASH_PIECE]
            n = self._f.write(piece)
            n = len(piece) if n is None else n
            if not self._seeked:
                self._hash.update(piece[:n])
            done += n
            if n < len(piece):
                break
        self._at += done
        self.size = max(self.size, self._at)
        return done

    def seek(self, offset: int, whence: int = 0) -> int:
        self._seeked = True
        self._at = self._f.seek(offset, whence)
        return self._at

    def tell(self) -> int:
        return self._at

    def flush(self) -> None:
        self._f.flush()

    def fsync(self) -> None:
        self._f.flush()
        os.fsync(self._f.fileno())

    def fileno(self) -> int:
        return self._f.fileno()

    def close(self) -> None:
        if self.closed:
            return
        self.closed = True
        try:
            if self.sync:
                self.fsync()
        finally:
            self._f.close()
        self.digest = None if self._seeked else self._hash.hexdigest()


class LocalFileSystem:
    """The stock filesystem: what the seam does when no fault is injected."""

    def open_write(self, path: str, *, sync: bool = True) -> LocalWriteStream:
        return LocalWriteStream(str(path), sync)

    def open_read(self, path: str) -> BinaryIO:
        return open_regular(path)  # a FIFO, device or socket is refused, never opened

    def rename(self, src: str, dst: str) -> None:
        os.replace(src, dst)

    def exchange(self, a: str, b: str) -> None:
        """Swap two paths atomically (renameat2 RENAME_EXCHANGE); elsewhere fall back to two renames."""
        if sys.platform.startswith("linux"):
            libc = ctypes.CDLL(None, use_errno=True)
            if hasattr(libc, "renameat2"):
                rc = libc.renameat2(_AT_FDCWD, os.fsencode(a), _AT_FDCWD, os.fsencode(b), _RENAME_EXCHANGE)
                if rc == 0:
                    return
                err = ctypes.get_errno()
                if err not in (errno.ENOSYS, errno.EINVAL):
                    raise OSError(err, os.strerror(err), a)
        aside = f"{b}.aside"
        os.replace(b, aside)
        os.replace(a, b)
        os.replace(aside, a)

    def mkdir(self, path: str) -> None:
        os.makedirs(path, exist_ok=True)

    def unlink(self, path: str) -> None:
        os.unlink(path)

    def rmtree(self, path: str) -> None:
        shutil.rmtree(path, ignore_errors=True)

    def fsync_dir(self, path: str) -> None:
        fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)

    def listdir(self, path: str) -> list[str]:
        return sorted(os.listdir(path))

    def exists(self, path: str) -> bool:
        return os.path.exists(path)

    def is_dir(self, path: str) -> bool:
        return os.path.isdir(path)

    def size(self, path: str) -> int:
        return os.path.getsize(path)
