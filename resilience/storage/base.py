"""The filesystem interface of the I/O seam. A fault injector wraps it; stock behaviour is LocalFileSystem."""
from __future__ import annotations

import contextlib
from typing import BinaryIO, Iterator, Protocol, runtime_checkable


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


_current: FileSystem | None = None


def current() -> FileSystem:
    """The filesystem this process's checkpoint code uses now."""
    global _current
    if _current is None:
        from .local import LocalFileSystem
        _current = LocalFileSystem()
    return _current


@contextlib.contextmanager
def use(fs: FileSystem) -> Iterator[FileSystem]:
    """Route this process's checkpoint I/O through `fs` (an injector) for the duration."""
    global _current
    before = current()
    _current = fs
    try:
        yield fs
    finally:
        _current = before
