"""Copy-before-write staging of an async save.

An async save must hand the writer a consistent copy of the state, and the training step must not wait
for a copy of everything. The snapshot copies each tensor into a host buffer on the writer thread, in
order; meanwhile the training state announces every tensor it is about to change (`before_write`), and
a tensor not copied yet is copied first, by whichever thread gets there first. The step waits only for
the copies of what it changes (the pipelined snapshot of CheckFreq, FAST '21). Objects are small and
are copied at once. Buffers are reused from save to save: fresh memory costs a page fault per 4 KiB,
several times the copy itself."""

from __future__ import annotations

import contextlib
import ctypes
import functools
import threading
import time
from collections.abc import Iterable

import torch

from ..state.sharding import Record, ShardedObject, ShardedTensor


@functools.cache
def _libc():
    return ctypes.CDLL("libc.so.6")


def return_freed_memory() -> None:
    """Hand the heap's free pages back to the kernel (glibc's malloc_trim). Host copies smaller than
    glibc's mmap threshold (32 MiB at most) come from the heap, and freed they stay resident, counted
    against the machine as before; a no-op without glibc."""
    with contextlib.suppress(OSError, AttributeError):
        _libc().malloc_trim(0)


def storage_key(t: torch.Tensor) -> int:
    """Tensors that share memory (a view and its base) share this key."""
    return t.untyped_storage().data_ptr()


class StagedCopy:
    """The staged copy of `records` for one async save. `copy_all()` (writer thread) returns the staged
    records once every tensor is copied; `before_write(tensors)` (training thread) returns once those
    tensors' records are copied. `waited` counts the seconds the training thread spent in it."""

    def __init__(self, records: list[Record], buffers: dict[str, torch.Tensor] | None = None):
        self.records: list[Record] = []
        self._copies: list[tuple[torch.Tensor, torch.Tensor]] = []  # (live tensor, its buffer)
        self._by_storage: dict[int, list[int]] = {}
        kept = {}
        for r in records:
            if isinstance(r, ShardedTensor):
                data = r.data.detach()
                buf = buffers.get(r.key) if buffers is not None else None
                if buf is None or (buf.shape, buf.dtype, buf.stride()) != (data.shape, data.dtype, data.stride()):
                    buf = torch.empty_like(data)
                kept[r.key] = buf
                self._by_storage.setdefault(storage_key(data), []).append(len(self._copies))
                self._copies.append((data, buf))
                self.records.append(
                    ShardedTensor(r.key, buf, r.global_shape, r.global_offset, r.replica_id, r.logical_shape)
                )
            elif isinstance(r, ShardedObject):
                v = r.value.clone() if isinstance(r.value, torch.Tensor) else r.value
                self.records.append(ShardedObject(r.key, v, r.global_shape, r.global_offset, r.replica_id))
        if buffers is not None:  # keys no longer saved release their buffers
            buffers.clear()
            buffers.update(kept)
        self._lock = threading.Lock()
        self._claimed = [False] * len(self._copies)
        self._done = [threading.Event() for _ in self._copies]
        self._failed: BaseException | None = None
        self.complete = not self._copies
        self.waited = 0.0

    def _ensure(self, i: int) -> None:
        with self._lock:
            mine = not self._claimed[i]
            self._claimed[i] = True
        if not mine:
            self._done[i].wait()
            return
        try:
            src, buf = self._copies[i]
            buf.copy_(src)  # torch releases the GIL here: both threads can copy at once
        except BaseException as e:
            self._failed = e
            raise
        finally:
            self._done[i].set()

    def before_write(self, tensors: Iterable[torch.Tensor]) -> None:
        if self.complete:
            return
        t0 = time.perf_counter()
        for t in tensors:
            for i in self._by_storage.get(storage_key(t), ()):
                self._ensure(i)
        self.waited += time.perf_counter() - t0

    def copy_all(self) -> list[Record]:
        for i in range(len(self._copies)):
            self._ensure(i)
        self.complete = True
        if self._failed is not None:  # a copy the training thread made failed: the snapshot is not whole
            raise RuntimeError(f"staging copy failed: {type(self._failed).__name__}: {self._failed}")
        return self.records
