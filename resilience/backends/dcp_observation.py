"""How the framework observes stock DCP, without changing what DCP does (resilience.backends.stock_dcp;
docs/adapters.md): the writer's and reader's `fs` is an ObservedFileSystem, whose every operation goes
through the storage seam with DCP's own semantics, and DCP's own `os.fsync(stream.fileno())` reaches the
same seam stream through a stand-in for `os` inside torch's filesystem module."""

from __future__ import annotations

import contextlib
import io
import os
import threading

from torch.distributed.checkpoint import FileSystemReader, FileSystemWriter, filesystem as dcp_filesystem
from torch.distributed.checkpoint.filesystem import FileSystemBase

from .. import storage


class _RawSeamStream(io.RawIOBase):
    """A seam WriteStream as the raw layer under a BufferedWriter."""

    def __init__(self, stream):
        super().__init__()
        self.stream = stream

    def writable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def write(self, b) -> int:
        n = self.stream.write(b)
        return len(memoryview(b)) if n is None else n

    def tell(self) -> int:
        return self.stream.tell()

    def seek(self, offset: int, whence: int = 0) -> int:
        if (offset, whence) == (0, io.SEEK_CUR):
            return self.stream.tell()
        return self.stream.seek(offset, whence)

    def fileno(self) -> int:
        return self.stream.fileno()

    def close(self) -> None:
        if not self.closed:
            try:
                self.stream.close()
            finally:
                super().close()


class _FsyncRouter:
    """Stands in for `os` inside torch.distributed.checkpoint.filesystem: the real module, except that
    fsync of a descriptor opened through ObservedFileSystem goes to that seam stream's fsync."""

    def __init__(self, real):
        self._real = real
        self._streams: dict[int, object] = {}
        self._lock = threading.Lock()

    def __getattr__(self, name):
        return getattr(self._real, name)

    def register(self, fd: int, stream) -> None:
        with self._lock:
            self._streams[fd] = stream

    def forget(self, fd: int) -> None:
        with self._lock:
            self._streams.pop(fd, None)

    def fsync(self, fd: int) -> None:
        with self._lock:
            stream = self._streams.get(fd)
        if stream is None:
            return self._real.fsync(fd)
        stream.fsync()  # type: ignore[attr-defined]  # a seam WriteStream


def install_fsync_router() -> _FsyncRouter:
    """Idempotent, per process."""
    if not isinstance(dcp_filesystem.os, _FsyncRouter):
        dcp_filesystem.os = _FsyncRouter(dcp_filesystem.os)  # type: ignore[assignment]  # a stand-in for `os`
    return dcp_filesystem.os  # type: ignore[return-value]


class ObservedFileSystem(FileSystemBase):
    """DCP's FileSystem semantics (pathlib open/rename/mkdir -p/exists/unlink, no fsync of its own,
    no directory fsync) carried out through storage.current()."""

    def __init__(self):
        self.router = install_fsync_router()

    # DCP's process executor pickles the writer into its checkpoint process: the router is made there again
    def __getstate__(self) -> dict:
        return {}

    def __setstate__(self, state: dict) -> None:
        self.router = install_fsync_router()

    def create_stream(self, path, mode: str):
        return self._stream(os.fspath(path), mode)

    @staticmethod
    def _blksize(fd: int) -> int:
        size = os.fstat(fd).st_blksize
        return size if size > 1 else io.DEFAULT_BUFFER_SIZE

    def _stream(self, path: str, mode: str):
        @contextlib.contextmanager
        def opened():
            if "w" in mode:
                raw = storage.current().open_write(path, sync=False)
                fd = raw.fileno()
                stream = io.BufferedWriter(_RawSeamStream(raw), buffer_size=self._blksize(fd))
                self.router.register(fd, raw)
                try:
                    yield stream
                finally:
                    try:
                        stream.close()
                    finally:
                        self.router.forget(fd)
            elif "r" in mode:
                with storage.current().open_read(path) as reading:
                    yield reading
            else:
                raise ValueError(f"{path}: unsupported stream mode {mode!r}")

        return opened()

    def concat_path(self, path, suffix: str) -> str:
        return os.path.join(os.fspath(path), suffix)

    def init_path(self, path) -> str:
        return os.fspath(path)

    def rename(self, path, new_path) -> None:
        storage.current().rename(os.fspath(path), os.fspath(new_path))

    def mkdir(self, path) -> None:
        storage.current().mkdir(os.fspath(path))

    @classmethod
    def validate_checkpoint_id(cls, checkpoint_id) -> bool:
        return "://" not in os.fspath(checkpoint_id)

    def exists(self, path) -> bool:
        return storage.current().exists(os.fspath(path))

    def rm_file(self, path) -> None:
        storage.current().unlink(os.fspath(path))

    def ls(self, path) -> list[str]:
        folder = os.fspath(path)
        return [os.path.join(folder, n) for n in storage.current().listdir(folder)]


def _object_store():
    """The storage seam's file system when it is an object store's (objectstore.storage), else None."""
    fs = storage.current()
    return fs if hasattr(fs, "object_url") else None


def writer(folder: str, client: str = "fsspec", **options) -> FileSystemWriter:
    """DCP's writer of `folder`, observed through the seam; on an object store, DCP's own ways there: its fsspec
    writer over s3fs, or multi-storage-client's writer (`client`), reaching the bucket by HTTP like any DCP
    user's (faults are then the HTTP layer's)."""
    store = _object_store()
    if store is not None and client == "msc":
        from multistorageclient.contrib.torch import MultiStorageFileSystemWriter

        from .msc_profile import msc_url

        return MultiStorageFileSystemWriter(msc_url(store, folder), **options)
    if store is not None:
        from torch.distributed.checkpoint._fsspec_filesystem import FsspecWriter

        options.pop("cache_staged_state_dict", None)  # the fsspec writer has no such option
        return FsspecWriter(store.object_url(folder), **options, **store.fsspec_options)
    w = FileSystemWriter(folder, **options)
    w.fs = ObservedFileSystem()  # type: ignore[assignment]  # DCP's FileSystem, observed
    w.path = w.fs.init_path(folder)
    return w


def reader(folder: str, client: str = "fsspec") -> FileSystemReader:
    """DCP's reader of `folder`, as `writer` chooses."""
    store = _object_store()
    if store is not None and client == "msc":
        from multistorageclient.contrib.torch import MultiStorageFileSystemReader

        from .msc_profile import msc_url

        return MultiStorageFileSystemReader(msc_url(store, folder))
    if store is not None:
        from torch.distributed.checkpoint._fsspec_filesystem import FsspecReader

        return FsspecReader(store.object_url(folder), **store.fsspec_options)
    r = FileSystemReader(folder)
    r.fs = ObservedFileSystem()  # type: ignore[assignment]  # as above
    r.path = r.fs.init_path(folder)
    return r
