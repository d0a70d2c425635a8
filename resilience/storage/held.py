"""Files read once into memory and served from there: a checkpoint's load reads each byte from disk once.

A loader that must check every file's checksum before trusting it would otherwise read each file twice
(once to hash, once to load). `read_hashed` reads a whole file through the seam in cache-sized pieces,
hashing each piece right after it is read (as LocalWriteStream does on write); `HeldFiles` then answers
`open_read` for those files from memory and passes everything else to the file system it wraps."""

from __future__ import annotations

import ctypes
import io
import mmap
import os
import weakref
from collections.abc import Iterator
from typing import BinaryIO

import xxhash

from . import base, seam
from .local import HASH_PIECE

MAP_PIECE = 8 << 20  # hashing a mapping copies nothing: pieces only bound each call
Buffer = bytearray | mmap.mmap


def read_hashed(path: str, size_hint: int) -> tuple[Buffer, str]:
    """(every byte of `path`, its xxh3-128), read through the seam once; `size_hint` is the size the
    file should have (a file that is longer or shorter is read and hashed whole all the same).

    A real file is mapped: the page cache's bytes are hashed and later loaded without a copy into a
    buffer of our own. The mapping is private and writable (copy on write: nothing reaches the file), so
    tensors loaded as views of it (storage.torch_load) are ordinary writable tensors. Anything else (a
    file object with no descriptor, an empty file) is read in cache-sized pieces, each hashed right after
    it is read.

    A hashed piece of a mapping leaves this process's memory at once, and a loaded one once copied into
    place (`release_span`): the page cache keeps the bytes, and the load faults them in again from there,
    so a rank's resident memory stays near its state instead of its state plus every file it reads."""
    with seam.current().open_read(path) as f:
        mapped = _mapped(f, path)
        if mapped is not None:
            h = xxhash.xxh3_128()
            with memoryview(mapped) as view:
                for at in range(0, len(view), MAP_PIECE):
                    h.update(view[at : at + MAP_PIECE])
                    mapped.madvise(mmap.MADV_DONTNEED, at, min(MAP_PIECE, len(view) - at))
            _held_mappings.append((_address(mapped), len(mapped), weakref.ref(mapped)))
            return mapped, h.hexdigest()
        return _read_pieces(f, size_hint)


_held_mappings: list[tuple[int, int, weakref.ref]] = []  # (address, length, mapping) of each mapping made here


def _address(m: mmap.mmap) -> int:
    _held_mappings[:] = [e for e in _held_mappings if e[2]() is not None]  # closed or collected: forgotten
    return ctypes.addressof(ctypes.c_char.from_buffer(m))  # the ctypes object goes at once: m stays closable


def release_span(start: int, nbytes: int) -> None:
    """Drop the whole pages of `start`..`start + nbytes` (addresses) that lie in a mapping of read_hashed
    from this process: their bytes were copied into place. Private and never written, so touching them
    again reads the file's bytes back from the page cache. Memory that is not such a mapping is left alone."""
    page = mmap.PAGESIZE
    for at, length, ref in _held_mappings:
        m = ref()
        if m is not None and not m.closed and at <= start < at + length:  # a closed one's range may be reused
            lo = -(-(start - at) // page) * page
            hi = min(start - at + nbytes, length) // page * page
            if hi > lo:
                m.madvise(mmap.MADV_DONTNEED, lo, hi - lo)
            return


def _mapped(f, path: str) -> mmap.mmap | None:
    """The whole file of `f`, mapped (private, copy on write); None when it has no descriptor, cannot be mapped, or lies
    on a FUSE file system (a read error there, an injected one included, would reach a mapping as SIGBUS
    instead of an OSError: such files are read)."""
    try:
        fd = f.fileno()
        if not isinstance(fd, int) or os.fstat(fd).st_size == 0 or not _plain_disk(path):
            return None
        # faulted in as hashed (the kernel maps neighbouring pages at each fault): populating it up front
        # costs more, most of all for a writable mapping
        return mmap.mmap(fd, 0, flags=mmap.MAP_PRIVATE, prot=mmap.PROT_READ | mmap.PROT_WRITE)
    except (AttributeError, OSError, ValueError, io.UnsupportedOperation):
        return None


def _plain_disk(path: str) -> bool:
    """Whether `path` lies on a file system that is not FUSE (the mount table of /proc/self/mounts,
    read each time: a FUSE layer is mounted and unmounted per job). False when it cannot be told."""
    try:
        with open("/proc/self/mounts") as mounts:
            table = [line.split()[1:3] for line in mounts if len(line.split()) > 2]
    except OSError:
        return False
    real = os.path.realpath(path)
    best, kind = "", ""
    for point, fstype in table:
        point = point.replace("\\040", " ")
        if (real == point or real.startswith(point.rstrip("/") + "/")) and len(point) > len(best):
            best, kind = point, fstype
    return bool(best) and not kind.startswith("fuse")


def _read_pieces(f, size_hint: int) -> tuple[bytearray, str]:
    h = xxhash.xxh3_128()
    buf = bytearray(size_hint)
    view = memoryview(buf)
    at = 0
    for start, at in _fill(f, view, HASH_PIECE):
        h.update(view[start:at])
    if at == size_hint:  # whatever lies beyond the expected size counts too
        while True:
            more = f.read(HASH_PIECE)
            if not more:
                break
            h.update(more)
            view.release()
            buf += more
            view = memoryview(buf)
            at += len(more)
    view.release()
    if at < size_hint:
        del buf[at:]
    return buf, h.hexdigest()


_LARGE = 64 << 20  # an item's size past which its file is asked how much it really holds


def read_buffer(f, size: int) -> bytearray:
    """Up to `size` bytes from `f`'s position, read straight into a writable buffer of their own (a tensor
    parsed from it can be a view of it: storage.torch_load). A size past the file's end (a damaged or
    hostile index) gets no buffer of that size."""
    if size > _LARGE:
        try:
            here = f.tell()
            size = max(0, min(size, f.seek(0, os.SEEK_END) - here))
            f.seek(here)
        except (AttributeError, OSError, ValueError):  # not seekable: read what comes, growing the buffer
            return bytearray(f.read(size))
    buf = bytearray(size)
    view = memoryview(buf)
    at = max((end for _, end in _fill(f, view, size)), default=0)
    view.release()
    if at < size:
        del buf[at:]
    return buf


def _fill(f, view: memoryview, piece: int) -> Iterator[tuple[int, int]]:
    """Read `f` into `view` from its start, at most `piece` bytes a call, until it is full or `f` ends;
    (start, end) of each read."""
    at = 0
    readinto = getattr(f, "readinto", None) or _readinto_by_read(f)
    while at < len(view):
        n = readinto(view[at : at + piece])
        if not n:
            return
        yield at, at + n
        at += n


def _readinto_by_read(f):
    """readinto for a file object that only has read()."""

    def readinto(b) -> int:
        data = f.read(len(b))
        b[: len(data)] = data
        return len(data)

    return readinto


class MemoryFile(io.RawIOBase):
    """A read-only, seekable file over a buffer; `view` slices it without copying."""

    def __init__(self, data, name: str = "") -> None:
        super().__init__()
        self._data = memoryview(data).cast("B")
        self._at = 0
        self.name = name

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def readinto(self, b) -> int:
        at = self._at
        n = max(0, min(len(b), len(self._data) - at))
        # torch's zip reader calls this some twenty times per archive, with a buffer of bytes: no cast then
        if type(b) is bytearray or (type(b) is memoryview and b.format == "B" and b.ndim == 1):
            b[:n] = self._data[at : at + n]
        else:
            memoryview(b).cast("B")[:n] = self._data[at : at + n]
        self._at = at + n
        return n

    def readall(self) -> bytes:
        out = bytes(self._data[self._at :])
        self._at = len(self._data)
        return out

    def seek(self, offset: int, whence: int = os.SEEK_SET) -> int:
        if whence == os.SEEK_SET:
            at = offset
        elif whence == os.SEEK_CUR:
            at = self._at + offset
        elif whence == os.SEEK_END:
            at = len(self._data) + offset
        else:
            raise ValueError(f"invalid whence ({whence})")
        self._at = max(0, at)
        return self._at

    def tell(self) -> int:
        return self._at

    def memory(self) -> memoryview:
        """The whole buffer this file reads from (position 0 is its start), shared, not copied."""
        return self._data

    def view(self, offset: int, length: int) -> MemoryFile:
        """Bytes offset..offset+length as a file of their own, sharing this one's memory."""
        return MemoryFile(self._data[offset : offset + length], self.name)


def held_key(path: str) -> str:
    """How a path is known among held files: absolute and normalized."""
    return os.path.normpath(os.path.abspath(os.fspath(path)))


class HeldFiles:
    """A file system that reads the files it holds from memory and does everything else through
    `inner` (the seam's file system when it was made, fault injectors included)."""

    def __init__(self, inner: base.FileSystem, files: dict[str, Buffer] | None = None) -> None:
        self.inner = inner
        self.files = {held_key(p): data for p, data in (files or {}).items()}

    def hold(self, path: str, data: Buffer) -> None:
        self.files[held_key(path)] = data

    def before_reading(self) -> None:
        """Called by a reader on every rank once its plan is made, before the collective after which any
        rank reads (storage.dcp.SeamReader): nothing to do here, a verified load checks its files then."""

    def open_read(self, path: str) -> BinaryIO:
        data = self.files.get(held_key(path))
        if data is None:
            return self.inner.open_read(path)
        return MemoryFile(data, str(path))  # type: ignore[return-value]  # a binary file object

    def __getattr__(self, name: str):
        return getattr(self.inner, name)
