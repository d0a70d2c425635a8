"""The filesystem interface of the I/O seam. A fault injector wraps it; stock behaviour is LocalFileSystem
(storage.local); which one checkpoint code uses now is storage.seam's."""

from __future__ import annotations

import errno
from typing import BinaryIO, Protocol, runtime_checkable


@runtime_checkable
class WriteStream(Protocol):
    """A file open for writing. close() fsyncs unless opened with sync=False; size and digest
    (xxh3-128 of everything written, or None if the stream seeked) are known after close."""

    path: str
    size: int
    digest: str | None

    def write(self, data) -> int: ...
    def flush(self) -> None: ...
    def fsync(self) -> None: ...
    def tell(self) -> int: ...
    def fileno(self) -> int: ...
    def close(self) -> None: ...
    def __enter__(self) -> WriteStream: ...  # `with` closes it
    def __exit__(self, *exc: object) -> None: ...


@runtime_checkable
class FileSystem(Protocol):
    """Every file operation of a checkpoint implementation. Paths are plain strings."""

    def open_write(self, path: str, *, sync: bool = True) -> WriteStream: ...
    def open_read(self, path: str) -> BinaryIO: ...
    def rename(self, src: str, dst: str) -> None: ...
    def exchange(self, a: str, b: str) -> None: ...
    def mkdir(self, path: str) -> None: ...
    def unlink(self, path: str) -> None: ...
    def rmtree(self, path: str) -> None: ...
    def fsync_dir(self, path: str) -> None: ...
    def listdir(self, path: str) -> list[str]: ...
    def exists(self, path: str) -> bool: ...
    def is_dir(self, path: str) -> bool: ...
    def size(self, path: str) -> int: ...


class WriteStreamBase:
    """What every write stream answers alike: io's capability queries, and `with` closing it."""

    def writable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def readable(self) -> bool:
        return False

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()  # type: ignore[attr-defined]  # each stream has one, or forwards it (__getattr__)


def write_all(stream: WriteStream, data) -> int:
    """Write every byte: a short write is continued, a write that makes no progress fails. Callers such
    as torch.save and DCP ignore the count write() returns, so a short write would go unnoticed."""
    view = memoryview(data)
    if view.format != "B" or view.ndim != 1:
        view = view.cast("B")
    total = len(view)
    n = stream.write(view) or 0  # almost always all of it: the loop below is for the rest
    if n == total:
        return total
    if n < 0:
        n = 0
    if n == 0 and total:
        raise OSError(errno.EIO, f"write made no progress on {stream.path}", stream.path)
    view = view[n:]
    while view:
        n = stream.write(view) or 0
        if n <= 0:
            raise OSError(errno.EIO, f"write made no progress on {stream.path}", stream.path)
        view = view[n:]
    return total
