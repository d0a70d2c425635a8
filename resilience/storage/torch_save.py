"""torch.save without the CRC32 of its zip records, while a checkpoint of the reference is written.

torch.load never checks that CRC (a flipped byte loads as it is), and every file the reference writes is
hashed as it is written (xxh3-128, kept in the manifest) and checked before a load trusts it: the CRC is a
second pass over every byte that nothing reads, some 40% of a save's CPU (0.54 of 1.38 CPU seconds for a
1 GiB save over 4 ranks; `python -m benchmarks checkpoint` prints it). Files written without it load in
torch.load, dcp.load and megatron-core alike; only zip tools that test archives (`unzip -t`) complain.

torch's switch (torch.utils.serialization.config) holds per thread: it is off in the thread that writes,
for as long as it writes, and nothing else in the process sees it.

Without the CRC, torch.save's archive of a tensor is its shape's bytes around its own: `save_tensor`
writes a DCP format's thousands of tensor items from one template per shape."""

from __future__ import annotations

import contextlib
import io
from collections.abc import Iterator
from typing import IO, cast

import torch
from torch import serialization

from .base import write_all


@contextlib.contextmanager
def without_crc32() -> Iterator[None]:
    from torch.utils.serialization import config

    before = config.save.compute_crc32
    config.save.compute_crc32 = False
    try:
        yield
    finally:
        config.save.compute_crc32 = before


HOLE_MIN = 64 << 10  # a write this large while a template is taken is the tensor's bytes: never copied


def save_tensor(t: torch.Tensor, stream) -> None:
    """torch.save(t, stream), byte for byte; for a plain CPU tensor, in three writes: the archive's bytes
    before the tensor's, the tensor's own, and the rest.

    Without the CRC32 (without_crc32), an archive of one plain tensor is a function of its dtype and shape
    and of nothing in its values: two tensors of one shape differ only in the bytes of `data/0`. torch.save
    pickles the tensor, builds a zip writer and makes some forty small writes for every tensor, and a
    checkpoint writes thousands of tensors of a few dozen shapes. Each shape's bytes around the tensor's are
    taken once, from torch.save itself (its tensor bytes left out), and written around every later tensor
    of that shape (storage.torch_load does the same on the read side). Anything else, and every tensor
    while the CRC is on, is torch.save's."""
    from torch.utils.serialization import config

    key = _template_key(t)
    if key is None or config.save.compute_crc32:
        torch.save(t, stream)
        return
    if key not in _TEMPLATES and len(_TEMPLATES) < _MAX_TEMPLATES:
        _TEMPLATES[key] = _template(t)
    template = _TEMPLATES.get(key)
    if template is None:
        torch.save(t, stream)
        return
    head, tail = template
    write_all(stream, head)
    write_all(stream, _bytes_of(t))
    write_all(stream, tail)


_TEMPLATES: dict[tuple, tuple[bytes, bytes] | None] = {}  # _template_key -> (head, tail), None: torch.save's
_MAX_TEMPLATES = 4096  # shapes remembered (a model has a few dozen)


def is_plain(t) -> bool:
    """A plain CPU tensor: what torch.save pickles as its dtype, shape, strides and storage alone (no
    subclass, autograd, quantization, conjugate or negative bit, attributes or hooks)."""
    return (
        type(t) is torch.Tensor
        and t.layout == torch.strided
        and t.device.type == "cpu"
        and not t.requires_grad
        and not t.is_quantized
        and not t.is_conj()
        and not t.is_neg()
        and not t.__dict__
        and not t._backward_hooks
    )


def _template_key(t: torch.Tensor) -> tuple | None:
    """What torch.save's bytes around a tensor depend on, for a tensor whose archive is its dtype, its
    shape and its bytes alone; None for any other (a subclass, a view into a larger storage, autograd...)."""
    if (
        not is_plain(t)
        or not t.is_contiguous()
        or t.storage_offset() != 0
        or t.numel() == 0
        or t.untyped_storage().nbytes() != t.numel() * t.element_size()
    ):
        return None
    return (t.dtype, tuple(t.shape), serialization._get_storage_alignment())


def _bytes_of(t: torch.Tensor):
    return t.reshape(-1).view(torch.uint8).numpy()


def _template(t: torch.Tensor) -> tuple[bytes, bytes] | None:
    """(the bytes before `t`'s, the bytes after) in torch.save's archive of `t`, or None where the archive
    is not laid out as one record of exactly `t`'s bytes."""
    capture = _Capture()
    torch.save(t, cast(IO[bytes], capture))
    n = t.untyped_storage().nbytes()
    if capture.holes > 1:
        return None
    try:
        with serialization._open_zipfile_reader(cast(IO[bytes], capture.reader())) as archive:
            records = set(archive.get_all_records())
            at = archive.get_record_offset(_DATA)
    except Exception:
        return None
    if not any(r.endswith(_DATA) for r in records) or any(r.endswith("data/1") for r in records):
        return None
    if capture.holes:  # the tensor's bytes were the one large write, left out
        if capture.hole != (at, n):
            return None
        return bytes(capture.head), bytes(capture.tail)
    head = bytes(capture.head)
    if head[at : at + n] != _bytes_of(t).tobytes():
        return None
    return head[:at], head[at + n :]


_DATA = "data/0"


class _Capture(io.RawIOBase):
    """The stream torch.save writes a template through: every write kept but one large one (the tensor's
    bytes), which is remembered as a hole of zeros."""

    def __init__(self) -> None:
        self.head, self.tail = bytearray(), bytearray()
        self.hole: tuple[int, int] | None = None
        self.holes = 0

    def writable(self) -> bool:
        return True

    def write(self, data) -> int:
        view = memoryview(data).cast("B")
        if view.nbytes >= HOLE_MIN:
            self.holes += 1
            self.hole = (len(self.head), view.nbytes)
        elif self.hole is None:
            self.head += view
        else:
            self.tail += view
        return view.nbytes

    def reader(self) -> _Holey:
        return _Holey(bytes(self.head), self.hole[1] if self.hole else 0, bytes(self.tail))


class _Holey(io.RawIOBase):
    """A captured archive to read back: its bytes, with zeros for the hole (never allocated: the zip
    reader reads headers and the directory, not the tensor)."""

    def __init__(self, head: bytes, hole: int, tail: bytes) -> None:
        self._head, self._hole, self._tail = head, hole, tail
        self._size = len(head) + hole + len(tail)
        self._at = 0

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        base = {io.SEEK_SET: 0, io.SEEK_CUR: self._at, io.SEEK_END: self._size}[whence]
        self._at = max(0, base + offset)
        return self._at

    def tell(self) -> int:
        return self._at

    def readinto(self, buffer) -> int:
        view = memoryview(buffer).cast("B")
        start = self._at
        n = max(0, min(len(view), self._size - start))
        chunk = bytearray(n)  # zeros where the hole is
        head = self._head[start : start + n]
        chunk[: len(head)] = head
        tail_at = len(self._head) + self._hole
        if start + n > tail_at:
            lo = max(start, tail_at)
            chunk[lo - start :] = self._tail[lo - tail_at : start + n - tail_at]
        view[:n] = chunk
        self._at += n
        return n
