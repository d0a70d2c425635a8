"""Sharded records: what Megatron's ShardedTensor / ShardedObject carry, and the coverage check."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from math import prod
from typing import Any

import torch

from ..errors import ResilienceError


@dataclass
class ShardedTensor:
    """One rank's piece of a global tensor. Only replica 0 of each piece is written."""

    key: str
    data: torch.Tensor
    global_shape: tuple[int, ...]
    global_offset: tuple[int, ...]
    replica_id: int = 0
    # The meaningful part of the global tensor. Rows past it are padding (Megatron's padded vocabulary),
    # whose count depends on tp; they may differ between save and load.
    logical_shape: tuple[int, ...] | None = None

    @property
    def local_shape(self) -> tuple[int, ...]:
        return tuple(self.data.shape)

    @property
    def logical(self) -> tuple[int, ...]:
        return self.logical_shape or self.global_shape

    def box(self) -> tuple[tuple[int, int], ...]:
        return tuple((o, o + s) for o, s in zip(self.global_offset, self.local_shape))

    def describe(self) -> dict:
        """Everything but the data: what a coverage check or a manifest needs."""
        return {
            "key": self.key,
            "global_shape": list(self.global_shape),
            "global_offset": list(self.global_offset),
            "local_shape": list(self.local_shape),
            "replica_id": self.replica_id,
            "dtype": str(self.data.dtype).removeprefix("torch."),
            "logical_shape": list(self.logical_shape) if self.logical_shape else None,
        }


@dataclass
class ShardedObject:
    """Non-tensor state (or a tensor whose sharding cannot change, like RNG) at a grid position."""

    key: str
    value: Any
    global_shape: tuple[int, ...] = (1,)
    global_offset: tuple[int, ...] = (0,)
    replica_id: int = 0

    @property
    def unique_key(self) -> str:
        """Megatron names each object piece by its grid position."""
        return f"{self.key}/shard_{'.'.join(map(str, self.global_offset))}_{'.'.join(map(str, self.global_shape))}"

    def describe(self) -> dict:
        return {
            "key": self.key,
            "global_shape": list(self.global_shape),
            "global_offset": list(self.global_offset),
            "replica_id": self.replica_id,
        }


Record = ShardedTensor | ShardedObject


class ShardingIntegrityError(ResilienceError, ValueError):
    """The shards of a topology do not cover every global element exactly once."""


@dataclass
class _Boxes:
    shape: tuple[int, ...]
    main: list = field(default_factory=list)
    replicas: list = field(default_factory=list)


def _overlap(a, b) -> bool:
    return all(lo1 < hi2 and lo2 < hi1 for (lo1, hi1), (lo2, hi2) in zip(a, b))


def _first_overlap(boxes: list) -> tuple | None:
    """Two boxes sharing an element, if any. A sweep along the dimension the boxes split most: only boxes
    whose spans there meet are compared (every pair, as a coordinator of 128 ranks would compare, is
    tens of thousands of comparisons per save)."""
    if len(boxes) < 2:
        return None
    dims = len(boxes[0])
    if not dims:
        return (boxes[0], boxes[1])  # two pieces of a tensor of no dimensions: the same element
    d = max(range(dims), key=lambda i: len({b[i][0] for b in boxes}))
    active: list = []
    for box in sorted(boxes, key=lambda b: b[d][0]):
        active = [a for a in active if a[d][1] > box[d][0]]
        for a in active:
            if _overlap(a, box):
                return (a, box)
        active.append(box)
    return None


def validate_sharding_integrity(descriptions: Iterable[dict]) -> None:
    """Check records gathered from all ranks (their `describe()`): for every tensor key the replica-0
    pieces tile the global shape exactly once, and every other replica lies inside it; for every object
    key each grid cell has exactly one replica 0. Raises ShardingIntegrityError naming the key."""
    by_key: dict[str, _Boxes] = {}
    for d in descriptions:
        shape = tuple(d["global_shape"])
        entry = by_key.setdefault(d["key"], _Boxes(shape))
        if entry.shape != shape:
            raise ShardingIntegrityError(f"{d['key']}: ranks disagree on global shape {entry.shape} vs {shape}")
        local = d.get("local_shape") or [1] * len(shape)
        box = tuple((o, o + s) for o, s in zip(d["global_offset"], local))
        if any(lo < 0 or hi > n for (lo, hi), n in zip(box, shape)):
            raise ShardingIntegrityError(f"{d['key']}: piece {box} lies outside global shape {shape}")
        (entry.main if d["replica_id"] == 0 else entry.replicas).append(box)
    for key, entry in by_key.items():
        boxes = [b for b in entry.main if all(hi > lo for lo, hi in b)]
        clash = _first_overlap(boxes)
        if clash is not None:
            raise ShardingIntegrityError(f"{key}: pieces {clash[0]} and {clash[1]} both write the same elements")
        covered = sum(prod(hi - lo for lo, hi in b) for b in boxes)
        if covered != prod(entry.shape):
            raise ShardingIntegrityError(f"{key}: replica-0 pieces cover {covered} of {prod(entry.shape)} elements")
        for r in entry.replicas:
            if all(hi > lo for lo, hi in r) and not any(
                all(lo1 <= lo2 and hi2 <= hi1 for (lo1, hi1), (lo2, hi2) in zip(m, r)) for m in boxes
            ):
                raise ShardingIntegrityError(f"{key}: replica piece {r} matches no written piece")
