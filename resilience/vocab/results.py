"""What a checkpoint backend answers (backends.base.CheckpointBackend): the result of a load, one
entry of a listing, and the rule that picks the LOCAL checkpoint a load must take."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any, TypeVar

K = TypeVar("K", int, tuple[int, int])


@dataclass
class LoadResult:
    """The iteration loaded (as saved), its folder, whether the RNG was restored exactly, and the
    warnings of every checkpoint passed over on the way to it."""

    iteration: int
    path: str
    rng_restored: bool
    warnings: list[str] = field(default_factory=list)


@dataclass
class CheckpointInfo:
    """One checkpoint folder a backend sees: complete (loadable as far as it can tell) or why not.
    `manifest` is the backend's own metadata of it when it keeps one (the reference's Manifest)."""

    iteration: int
    path: str
    complete: bool
    manifest: Any = None
    problem: str = ""


def on_every_rank(per_rank: Iterable[Iterable[K]]) -> list[K]:
    """The checkpoints (iterations, or (iteration, save number) pairs) that every rank holds valid,
    newest first. A LOCAL checkpoint is one folder per rank written without a collective: only one that
    every rank holds whole can be loaded, so a loader takes the first of these and the newest of the
    others is what it must not take. No ranks: none."""
    sets = [set(keys) for keys in per_rank]
    return sorted(set.intersection(*sets), reverse=True) if sets else []
