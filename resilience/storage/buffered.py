"""A write stream that coalesces small writes, as a file opened with open(path, "wb") does, and writes
every byte it hands down (storage.write_all: torch.save and DCP ignore the count write() returns, so a
short write would leave a committed but truncated file).

torch.save writes a zip record in some forty small writes (headers, names, padding, data); unbuffered,
each is a trip through the fault layer and the operation log below. Buffered, the seam sees the writes
a buffered file would make: the buffer goes down when it fills, on flush (torch.save flushes at its
end), fsync, seek, fileno and close, and a write at least as large as the buffer goes straight down.

torch.save's zip writer, when a write fails, fails again in its own cleanup and raises that instead (an
"unexpected pos" RuntimeError): `unmasked` gives the caller the write's error, which names the file and
the errno."""

from __future__ import annotations

import contextlib
import io
from collections.abc import Iterator

from .base import WriteStream, WriteStreamBase, write_all

BUFFER_SIZE = io.DEFAULT_BUFFER_SIZE  # what open(path, "wb") buffers


class BufferedStream(WriteStreamBase):
    """`inner` (a WriteStream) behind a buffer of `buffer_size` bytes. `error` is the first exception a
    write down raised; the bytes that write held are dropped, never written later by close (a failed
    write fails its save, as an unbuffered one would)."""

    def __init__(self, inner: WriteStream, buffer_size: int = BUFFER_SIZE):
        self._inner = inner
        self._buffer = bytearray()
        self._buffer_size = buffer_size
        self.error: BaseException | None = None
        self.closed = False

    def write(self, data) -> int:
        view = memoryview(data)
        n = view.nbytes
        if len(self._buffer) + n <= self._buffer_size:
            self._buffer += view
            return n
        self._drain()
        if n >= self._buffer_size:
            self._down(view)
        else:
            self._buffer += view
        return n

    def _drain(self) -> None:
        if self._buffer:
            data, self._buffer = self._buffer, bytearray()
            self._down(data)

    def _down(self, data) -> None:
        try:
            write_all(self._inner, data)
        except BaseException as e:
            if self.error is None:
                self.error = e
            raise

    def tell(self) -> int:
        return self._inner.tell() + len(self._buffer)

    def seek(self, offset: int, whence: int = 0) -> int:
        self._drain()
        return self._inner.seek(offset, whence)  # type: ignore[attr-defined]  # a seekable stream

    def flush(self) -> None:
        self._drain()
        self._inner.flush()

    def fsync(self) -> None:
        self._drain()
        self._inner.fsync()

    def fileno(self) -> int:
        self._drain()  # whoever asks for the descriptor may write or fsync it directly
        return self._inner.fileno()

    def close(self) -> None:
        if self.closed:
            return
        self.closed = True
        try:
            self._drain()
        except BaseException:
            with contextlib.suppress(Exception):  # the file is released all the same, as close(2) would
                self._inner.close()
            raise
        self._inner.close()

    @property
    def path(self) -> str:
        return self._inner.path

    @path.setter
    def path(self, value: str) -> None:  # DCP's rename of .metadata.tmp: the record follows the file
        self._inner.path = value

    @property
    def size(self) -> int:
        return self._inner.size

    @property
    def digest(self) -> str | None:
        return self._inner.digest

    def __getattr__(self, name):
        return getattr(self._inner, name)


@contextlib.contextmanager
def unmasked(stream: object) -> Iterator[None]:
    """Inside the block, an exception raised after a write of `stream` failed becomes that write's error
    (see the module's docstring); other streams, and other failures, pass unchanged."""
    try:
        yield
    except Exception as e:
        failed = getattr(stream, "error", None)
        if failed is None or failed is e or not isinstance(failed, Exception):
            raise
        raise failed from None
