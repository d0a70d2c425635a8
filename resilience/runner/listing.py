"""What a backend lists in a checkpoint folder (its `list_checkpoints`), checked against the protocol, for
`resilience inspect --backend` and `resilience adapter check`. One process, no collective."""

from __future__ import annotations

import os

from ..errors import CheckpointNotFound, ConfigError, ResilienceError
from ..vocab import Combination, valid_combinations
from .adapters import BackendName, resolve_backend

FIX = "fix the adapter; `resilience adapter check` runs each of its methods once and says what it found"


def default_combination(backend: BackendName) -> Combination:
    """The combination a backend is made for when none is named: the first its factory declares."""
    return (resolve_backend(backend).combinations() or valid_combinations())[0]


def listing_problems(listed) -> list[str]:
    """Where a list_checkpoints answer breaks the protocol: a list of CheckpointInfo (iteration: int,
    path: str, complete: bool, problem: str), newest first. Empty when it keeps it."""
    if not isinstance(listed, (list, tuple)):
        return [f"returned a {type(listed).__name__}, not a list of CheckpointInfo"]
    kinds = {"iteration": int, "path": str, "complete": bool, "problem": str}
    bad: dict[str, list[str]] = {}  # type of the item -> the fields it lacks
    for c in listed:
        lacks = [
            name
            for name, kind in kinds.items()
            if not isinstance(getattr(c, name, None), kind) or (kind is int and isinstance(c.iteration, bool))
        ]
        if lacks:
            bad.setdefault(type(c).__name__, lacks)
    out = [
        f"returned {name} items without a proper {', '.join(lacks)}: return "
        "resilience.backends.CheckpointInfo(iteration, path, complete, problem=...)"
        for name, lacks in bad.items()
    ]
    if not out:
        its = [c.iteration for c in listed]
        if its != sorted(its, reverse=True):
            out.append(f"iterations {its} are not newest first")
    return out


def listed_checkpoints(backend: BackendName, root: str, combo: Combination | None = None) -> tuple[Combination, list]:
    """(the combination used, what `backend` lists under `root`, newest first). CheckpointNotFound when
    `root` is no folder; one ConfigError naming the adapter when it raises or answers outside the protocol."""
    fs_root = os.path.abspath(root)
    if not os.path.exists(fs_root):
        raise CheckpointNotFound(f"{root}: no such folder")
    if not os.path.isdir(fs_root):
        raise CheckpointNotFound(f"{root}: not a folder")
    backend = resolve_backend(backend)
    combo = combo or default_combination(backend)
    made = backend.make(combo)
    try:
        listed = made.list_checkpoints(fs_root)
    except ResilienceError:
        raise
    except Exception as e:  # the adapter's own bug: named, not a traceback
        raise ConfigError(
            "backend", f"{backend}: list_checkpoints({root}) raised {type(e).__name__}: {e}", FIX
        ) from None
    bad = listing_problems(listed)
    if [p for p in bad if "newest first" not in p]:
        raise ConfigError("backend", f"{backend}: list_checkpoints({root}) {bad[0]}", FIX)
    return combo, sorted(listed, key=lambda c: -c.iteration)
