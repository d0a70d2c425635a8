"""The I/O seam for torch.distributed.checkpoint: DCP's file operations go through storage.current().

DCP's FileSystemWriter and FileSystemReader hard-code a plain FileSystem; the subclasses here install
SeamFileSystem instead (after the stock __init__, the way DCP's fsspec writer does). Streams opened for
writing are the seam's WriteStreams: they fsync on close and hash what they write, so DCP's own
os.fsync is turned off (sync_files=False) and the driver takes checksums from the streams.

SeamReader never runs DCP's plain pickle: `.metadata` goes through safe_pickle, and every file it
opens must be a regular file inside the checkpoint folder (storage.contained)."""

from __future__ import annotations

import contextlib
import errno
import functools
import os
import pickle
import queue
import threading
from collections.abc import Iterator
from typing import BinaryIO, cast

from torch.distributed._shard._utils import narrow_tensor_by_index
from torch.distributed.checkpoint.filesystem import (
    FileSystemBase,
    FileSystemReader,
    FileSystemWriter,
    SerializationFormat,
    _StorageInfo,
)
from torch.distributed.checkpoint.planner import LoadItemType, WriteItemType
from torch.distributed.checkpoint.storage import WriteResult
from torch.futures import Future

from . import base, safe_pickle, seam, torch_load, torch_save
from .buffered import unmasked
from .contained import check_inside
from .held import HeldFiles, MemoryFile, read_buffer


@contextlib.contextmanager
def _shippable() -> Iterator[None]:
    """DCP pickles a rank's exception to send it to the coordinator; one that cannot be unpickled (a
    custom __init__) would leave the other ranks waiting. Such errors travel as a plain OSError."""
    try:
        yield
    except Exception as e:
        try:
            pickle.loads(pickle.dumps(e))
        except Exception:
            raise OSError(getattr(e, "errno", None) or errno.EIO, f"{type(e).__name__}: {e}") from e
        raise


def _shipped(fn):
    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        with _shippable():
            return fn(*args, **kwargs)

    return wrapper


class SeamFileSystem(FileSystemBase):
    """DCP's filesystem operations routed through the current storage seam (read at each call, so a
    fault injector installed with storage.use() sees every byte)."""

    def __init__(self, root: str | None = None) -> None:
        self._written: dict[str, base.WriteStream] = {}  # path -> stream, to follow DCP's rename of .metadata.tmp
        self._lock = threading.Lock()
        self.root = root  # a reader's checkpoint folder: nothing outside it is opened

    @contextlib.contextmanager
    def create_stream(self, path, mode: str) -> Iterator:
        path = os.fspath(path)
        stream: base.WriteStream | BinaryIO
        with _shippable():
            if "w" in mode or "a" in mode:
                stream = seam.current().open_write(path)
                with self._lock:
                    self._written[path] = stream
            elif "r" in mode:
                if self.root is not None:
                    check_inside(path, self.root)
                stream = seam.current().open_read(path)
            else:
                raise ValueError(f"{path}: unsupported stream mode {mode!r}")
            try:
                with unmasked(stream):  # a failed write's own error, not torch.save's after it
                    yield stream
            finally:
                stream.close()

    def concat_path(self, path, suffix: str) -> str:
        return os.path.join(os.fspath(path), suffix)

    def init_path(self, path) -> str:
        return os.fspath(path)

    @_shipped
    def rename(self, path, new_path) -> None:
        src, dst = os.fspath(path), os.fspath(new_path)
        seam.current().rename(src, dst)
        with self._lock:
            stream = self._written.pop(src, None)
        if stream is not None:
            # the stream's record (size, checksum) now describes the renamed file
            stream.path = dst
            with self._lock:
                self._written[dst] = stream

    @_shipped
    def mkdir(self, path) -> None:
        seam.current().mkdir(os.fspath(path))

    @classmethod
    def validate_checkpoint_id(cls, checkpoint_id) -> bool:
        return "://" not in os.fspath(checkpoint_id)

    @_shipped
    def exists(self, path) -> bool:
        return seam.current().exists(os.fspath(path))

    @_shipped
    def rm_file(self, path) -> None:
        seam.current().unlink(os.fspath(path))

    @_shipped
    def ls(self, path) -> list[str]:
        folder = os.fspath(path)
        return [os.path.join(folder, name) for name in seam.current().listdir(folder)]


TORCH_SAVE = SerializationFormat.TORCH_SAVE


class SeamWriter(FileSystemWriter):
    """DCP's stock file writer, writing through the storage seam. Files are fsynced by the seam's
    streams on close, so DCP's own fsync is off. Tensor items are torch.save archives written by
    torch_save.save_tensor: the same bytes, without a torch.save call for every tensor."""

    def __init__(self, path, **kwargs) -> None:
        kwargs["sync_files"] = False
        super().__init__(path, **kwargs)
        self.fs = SeamFileSystem()  # type: ignore[assignment]  # DCP's FileSystem, through the seam
        self.path = self.fs.init_path(path)

    def _write_data(self, planner, file_queue: queue.Queue) -> Future:
        """DCP's _write_data (one writer thread, no stream extensions): every file of the queue, its byte
        items first and then its tensors, each item's place recorded as DCP records it. Any other setting
        takes DCP's own."""
        if self.thread_count != 1 or self.transforms.extensions or self.serialization_format != TORCH_SAVE:
            return super()._write_data(planner, file_queue)
        results: list[WriteResult] = []
        while not file_queue.empty():
            path, storage_key, items = file_queue.get_nowait()
            ordered = [wi for wi in items if wi.type == WriteItemType.BYTE_IO]
            ordered += [wi for wi in items if wi.type != WriteItemType.BYTE_IO]
            with self.fs.create_stream(path, "wb") as opened:
                stream = cast(base.WriteStream, opened)
                for item in ordered:
                    offset = stream.tell()
                    data = planner.resolve_data(item)
                    if item.type == WriteItemType.BYTE_IO:
                        base.write_all(stream, data.getbuffer())
                    else:
                        torch_save.save_tensor(_compact(data), stream)
                    length = stream.tell() - offset
                    results.append(WriteResult(item.index, length, _StorageInfo(storage_key, offset, length)))
        done: Future = Future()
        done.set_result(results)
        return done


class SeamReader(FileSystemReader):
    """DCP's stock file reader, reading through the storage seam."""

    def __init__(self, path, **kwargs) -> None:
        super().__init__(path, **kwargs)
        self.fs = SeamFileSystem(os.fspath(path))  # type: ignore[assignment]  # as above
        self.path = self.fs.init_path(path)

    def reset(self, checkpoint_id=None) -> None:
        super().reset(checkpoint_id)
        self._metadata: dict = {}  # another checkpoint, or another load of it: read its metadata again

    def read_metadata(self, *args, **kwargs):
        """DCP's read_metadata, with the restricted unpickler instead of pickle.load; read once per reader
        (a format that plans from the metadata before dcp.load does not pay for a second unpickling)."""
        rank = kwargs.get("rank")
        cached = self.__dict__.setdefault("_metadata", {})
        if rank not in cached:
            cached[rank] = read_metadata_safely(self, rank)
        return cached[rank]

    def prepare_local_plan(self, plan):
        """The last of DCP's plan step on this rank: the seam's held files check theirs now (a verified
        load, checkpoint.verified), so a failed check reaches every rank through the plan's collective,
        before any rank reads."""
        fs = seam.current()
        if isinstance(fs, HeldFiles):
            fs.before_reading()
        return super().prepare_local_plan(plan)

    def read_data(self, plan, planner):
        """DCP's read_data, with each tensor item parsed by storage.torch_load: an item of a held file (read
        and verified already, storage.held) becomes a view of its bytes, copied once, into its target.
        Items with DCP's stream transforms (extensions) take DCP's own loop."""
        infos = [self.storage_data[item.storage_index] for item in plan.items]
        if any(info.transform_descriptors for info in infos):
            return super().read_data(plan, planner)
        per_file: dict[str, list] = {}
        for item, info in zip(plan.items, infos):
            per_file.setdefault(info.relative_path, []).append((item, info))
        for relative_path, items in per_file.items():
            with self.fs.create_stream(self.fs.concat_path(self.path, relative_path), "rb") as stream:
                for item, info in items:
                    piece = self._slice_file(stream, info)
                    if item.type == LoadItemType.BYTE_IO:
                        # a buffer of the item's own: what it loads may outlive this read (no view of a held file)
                        planner.load_bytes(item, MemoryFile(bytearray(piece.read())))
                        continue
                    tensor = narrow_tensor_by_index(torch_load.load(piece), item.storage_offsets, item.lengths)
                    target = planner.resolve_tensor(item).detach()
                    if target.size() != tensor.size():
                        raise AssertionError(
                            f"req {item.storage_index} mismatch sizes {target.size()} vs {tensor.size()}"
                        )
                    target.copy_(tensor)
                    torch_load.release(tensor)
                    planner.commit_tensor(item, target)
        done: Future = Future()
        done.set_result(None)
        return done

    def _slice_file(self, file, sinfo):
        if isinstance(file, MemoryFile):  # read and verified already (storage.held): no copy
            return file.view(sinfo.offset, sinfo.length)
        # one read per item (torch.load through DCP's file view makes a Python call for every small read),
        # into a writable buffer: storage.torch_load makes the tensor a view of it, without torch.load's
        # zip reader and unpickler for every item
        file.seek(sinfo.offset)
        return MemoryFile(read_buffer(file, sinfo.length))


def _compact(tensor):
    """A tensor item as DCP writes it: on the CPU, and cloned when it views part of a larger storage
    (torch.save writes a tensor's whole storage)."""
    tensor = tensor.detach().cpu()
    if tensor.untyped_storage().nbytes() != tensor.numel() * tensor.element_size():
        tensor = tensor.clone()
    return tensor


def read_metadata_safely(reader: FileSystemReader, rank=None):
    """What FileSystemReader.read_metadata does, for any FileSystemReader, without plain pickle: the
    metadata through safe_pickle (IntegrityError naming the file and the refused class)."""
    from torch.distributed.checkpoint.metadata import StorageMeta

    path = reader._get_metadata_path(rank)
    with reader.fs.create_stream(path, "rb") as stream:
        metadata = safe_pickle.load_metadata(stream, os.fspath(path))
    if getattr(metadata, "storage_meta", None) is None:
        metadata.storage_meta = StorageMeta()
    metadata.storage_meta.load_id = reader.load_id
    return metadata
