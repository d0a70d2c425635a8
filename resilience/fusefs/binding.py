"""How libfuse's requests reach the operations (passthrough.py): mfusepy's FUSE class, with the wrappers it
gets wrong or makes slow for this file system replaced.

- rename and truncate: mfusepy drops rename's flags (RENAME_EXCHANGE, RENAME_NOREPLACE: dropping them
  would turn an atomic exchange into a rename that loses a file) and truncate's open file.
- write: mfusepy copies each request (up to max_write, 1 MiB) into a new bytes object; here the
  operations get a view of libfuse's own buffer instead. The view is only valid during the call, which
  the operations respect: they write it to the backing file and the log before they return.
- open and create: a file opened write-only is opened with direct_io, so the kernel hands the writer's own
  pages to the request instead of copying them into the mount's page cache first (pages nobody could
  read back through that descriptor). Each write(2) still arrives in order as requests of up to max_write;
  where a long one splits follows the writer's buffer rather than the file's pages (1 MiB from a buffer
  that does not start a page: a request of 1 MiB less that offset, then one of the rest). The bytes on
  disk and the log are the same either way, and a short or torn request leaves the mount's page cache
  holding nothing the backing file does not. The kernel invalidates cached pages of the range after such a
  write, so readers stay coherent. A file open for reading keeps the page cache (and mmap: a write-only
  descriptor cannot be mapped).
- every callback: a libfuse thread keeps the Python thread state its first callback made. ctypes makes one
  for a thread Python did not start and, left alone, frees it when the callback returns, so every request
  paid for a new one (and its frame stack's memory); libfuse's threads live as long as the mount."""

from __future__ import annotations

import ctypes
import os
import threading

import mfusepy

_KEPT = threading.local()  # `state` set on a libfuse thread once its thread state is kept


def _direct_io(flags: int) -> bool:
    return flags & os.O_ACCMODE == os.O_WRONLY


class FaultyFUSE(mfusepy.FUSE):
    """mfusepy.FUSE that passes rename's flags and truncate's open file on to the operations, writes from
    libfuse's buffer without a copy, opens write-only files with direct_io, and keeps each of libfuse's
    threads' Python thread state."""

    def _wrapper(self, func, *args, **kwargs):
        if not hasattr(_KEPT, "state"):
            # one more hold on this thread's state than the callback's own, which it releases on return
            _KEPT.state = ctypes.pythonapi.PyGILState_Ensure()
        return super()._wrapper(func, *args, **kwargs)

    def rename_fuse_3(self, old: bytes, new: bytes, flags: int) -> int:
        return self.operations.rename(
            old.decode(self.encoding, self.errors), new.decode(self.encoding, self.errors), flags
        )

    def truncate_fuse_3(self, path: bytes | None, length: int, fip) -> int:
        fh = fip.contents.fh if fip else None
        return self.operations.truncate(None if path is None else path.decode(self.encoding, self.errors), length, fh)

    def write(self, path: bytes | None, buf, size: int, offset: int, fip) -> int:
        if size:
            data = memoryview((ctypes.c_char * size).from_address(ctypes.addressof(buf.contents))).cast("B")
        else:
            data = memoryview(b"")
        return self.operations.write(
            None if path is None else path.decode(self.encoding, self.errors), data, offset, fip.contents.fh
        )

    def open(self, path: bytes, fip) -> int:
        fi = fip.contents
        fi.fh = self.operations.open(path.decode(self.encoding, self.errors), fi.flags)
        fi.direct_io = _direct_io(fi.flags)
        return 0

    def create(self, path: bytes, mode: int, fip) -> int:
        fi = fip.contents
        fi.fh = self.operations.create(path.decode(self.encoding, self.errors), mode, fi.flags)
        fi.direct_io = _direct_io(fi.flags)
        return 0


__all__ = ["FaultyFUSE"]
