"""Collectives for code that runs on every rank: the reference, the adapters, the cluster program.

Each also works in one process with no process group (a single-process test, `resilience inspect`),
where it is what that process alone would see: rank 0 of a world of 1, a gather of its own value.
`group` is a torch.distributed process group (None: the default one); every rank of it must make the
same calls in the same order, or the others wait. Errors are exchanged as strings, never raised inside
a collective: a rank that raised alone would leave the others waiting in the next one."""

from __future__ import annotations

import pickle
from typing import Any, TypeVar, cast

import torch
import torch.distributed as tdist

T = TypeVar("T")


def is_distributed() -> bool:
    return tdist.is_available() and tdist.is_initialized()


def this_rank() -> int:
    """This process's rank in the default group (0 without one)."""
    return tdist.get_rank() if is_distributed() else 0


def world_size() -> int:
    """The number of ranks in the default group (1 without one)."""
    return tdist.get_world_size() if is_distributed() else 1


def barrier(group: Any = None) -> None:
    if world_size() > 1:
        tdist.barrier(group=group)


def all_gather(obj: T, group: Any = None) -> list[T]:
    """Every rank's `obj`, in rank order, on every rank (picklable objects)."""
    if world_size() == 1:
        return [obj]
    out: list[Any] = [None] * tdist.get_world_size(group)
    tdist.all_gather_object(out, obj, group=group)
    return out


INLINE_BYTES = 1 << 16  # what a broadcast carries in its first collective: every object sent here fits


def broadcast(obj: T | None, group: Any = None, src: int = 0) -> T:
    """Rank `src`'s `obj` on every rank (the others pass anything, usually None); `src` is a rank of the
    default group. One collective when the pickled object fits in INLINE_BYTES (broadcast_object_list
    always makes two: the size, then the bytes), a second for the rest of a larger one."""
    if world_size() == 1:
        return cast(T, obj)
    head = torch.zeros(INLINE_BYTES, dtype=torch.uint8)
    data = b""
    if tdist.get_rank() == src:
        data = pickle.dumps(obj)
        first = len(data).to_bytes(8, "little") + data[: INLINE_BYTES - 8]
        head[: len(first)] = torch.frombuffer(bytearray(first), dtype=torch.uint8)
    tdist.broadcast(head, src=src, group=group)
    size = int.from_bytes(head[:8].numpy().tobytes(), "little")
    if size <= INLINE_BYTES - 8:
        return cast(T, pickle.loads(head[8 : 8 + size].numpy().tobytes()))
    rest = torch.zeros(size - (INLINE_BYTES - 8), dtype=torch.uint8)
    if data:
        rest[:] = torch.frombuffer(bytearray(data[INLINE_BYTES - 8 :]), dtype=torch.uint8)
    tdist.broadcast(rest, src=src, group=group)
    return cast(T, pickle.loads(head[8:].numpy().tobytes() + rest.numpy().tobytes()))


def all_agree(ok: bool, group: Any = None) -> bool:
    """True on every rank when `ok` is true on every rank (a MIN all-reduce of one integer)."""
    flag = torch.tensor([int(bool(ok))])
    if world_size() > 1:
        tdist.all_reduce(flag, op=tdist.ReduceOp.MIN, group=group)
    return bool(flag.item())


def gather_failures(error: str | None, group: Any = None) -> dict[int, str]:
    """{rank: error} of every rank whose `error` is not None (or empty), the same on every rank."""
    return {rank: e for rank, e in enumerate(all_gather(error, group)) if e}
