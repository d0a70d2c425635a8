"""Collectives for code that runs on every rank: the reference, the adapters, the cluster program.

Each also works in one process with no process group (a single-process test, `resilience inspect`),
where it is what that process alone would see: rank 0 of a world of 1, a gather of its own value.
`group` is a torch.distributed process group (None: the default one); every rank of it must make the
same calls in the same order, or the others wait. Errors are exchanged as strings, never raised inside
a collective: a rank that raised alone would leave the others waiting in the next one."""

from __future__ import annotations

import os
import pickle
from collections.abc import Iterator
from contextlib import contextmanager
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
    """Every rank's `obj`, in rank order, on every rank (picklable objects). Gloo's all-gather is a ring:
    each rank takes part in world - 1 steps and unpickles every object; where one rank needs them, `gather`
    costs the others one small all-reduce and one send."""
    if world_size() == 1:
        return [obj]
    out: list[Any] = [None] * tdist.get_world_size(group)
    tdist.all_gather_object(out, obj, group=group)
    return out


def _packed(data: bytes, width: int) -> torch.Tensor:
    """`data` behind its length (8 bytes), in a byte tensor of `width` (zeros after it)."""
    out = torch.zeros(width, dtype=torch.uint8)
    head = len(data).to_bytes(8, "little") + data
    out[: len(head)] = torch.frombuffer(bytearray(head), dtype=torch.uint8)
    return out


def _unpacked(t: torch.Tensor) -> Any:
    """The object `_packed` put in `t`."""
    raw = t.numpy().tobytes()
    return pickle.loads(raw[8 : 8 + int.from_bytes(raw[:8], "little")])


def _first_of(group: Any) -> bool:
    """Whether this rank is the group's first."""
    return tdist.get_group_rank(cast(Any, group or tdist.group.WORLD), tdist.get_rank()) == 0


def gather(obj: T, group: Any = None) -> list[T] | None:
    """Every rank's `obj`, in rank order, on the group's first rank; None on the others. One MAX
    all-reduce of the pickled sizes, then one gather of buffers of that size (torch's gather_object
    learns the sizes with an all-gather, whose cost on each rank grows with the world)."""
    if world_size() == 1:
        return [obj]
    data = pickle.dumps(obj)
    size = torch.tensor([len(data)], dtype=torch.int64)
    tdist.all_reduce(size, op=tdist.ReduceOp.MAX, group=group)
    width = 8 + int(size.item())
    into = (
        [torch.empty(width, dtype=torch.uint8) for _ in range(tdist.get_world_size(group))]
        if _first_of(group)
        else None
    )
    tdist.gather(_packed(data, width), into, group=group, group_dst=0)
    return None if into is None else [_unpacked(t) for t in into]


def scatter(per_rank: list | None, group: Any = None) -> Any:
    """Rank i of the group gets per_rank[i], a list given on the group's first rank (None elsewhere).
    An object that sits in the list more than once is pickled once (one sent to a rank and its replicas
    costs the sender once)."""
    if world_size() == 1:
        return per_rank[0] if per_rank else None
    first = _first_of(group)
    width = torch.zeros(1, dtype=torch.int64)
    data: list[bytes] = []
    if first:
        assert per_rank is not None and len(per_rank) == tdist.get_world_size(group)
        pickled: dict[int, bytes] = {}
        data = [pickled.setdefault(id(obj), pickle.dumps(obj)) for obj in per_rank]
        width[0] = 8 + max(len(d) for d in data)
    tdist.broadcast(width, group=group, group_src=0)
    size = int(width.item())
    buffers: list[torch.Tensor] | None = None
    if first:
        made: dict[int, torch.Tensor] = {}  # one buffer per object, however many ranks get it
        for d in data:
            if id(d) not in made:
                made[id(d)] = _packed(d, size)
        buffers = [made[id(d)] for d in data]
    out = torch.empty(size, dtype=torch.uint8)
    tdist.scatter(out, buffers, group=group, group_src=0)
    return _unpacked(out)


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
    """{rank: error} of every rank whose `error` is not None (or empty), the same on every rank: one small
    all-reduce when no rank has one, an all-gather only when some has."""
    if all_agree(not error, group):
        return {}
    return {rank: e for rank, e in enumerate(all_gather(error, group)) if e}


@contextmanager
def lazy_gloo() -> Iterator[None]:
    """Gloo process groups made inside connect each pair of ranks on its first exchange (torch's
    TORCH_GLOO_LAZY_INIT), unless the environment already says; the environment is as it was after. For the
    framework's own groups: a checkpoint's collectives (gathers to a coordinator, broadcasts) touch few of
    a group's pairs, and connecting every pair at start costs each of 128 ranks three times its CPU at 16
    (python -m benchmarks scenario). The groups and processes a backend makes connect as they would anywhere."""
    before = os.environ.get(_LAZY)
    os.environ.setdefault(_LAZY, "1")
    try:
        yield
    finally:
        if before is None:
            os.environ.pop(_LAZY, None)


_LAZY = "TORCH_GLOO_LAZY_INIT"
