"""Topology, model spec and the sharded training state every scenario checkpoints.

The names that need torch (the training state, sharded records, fingerprints) are imported on first use:
a command that only reads a scenario or refuses a bad one does not pay for importing torch."""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

from .model import ModelSpec, ParamLayout
from .topology import Coords, Topology, Transition

if TYPE_CHECKING:
    from .fingerprints import combine, differences, fingerprint
    from .sharding import ShardedObject, ShardedTensor, ShardingIntegrityError, validate_sharding_integrity
    from .training import GENERATION_PREFIX, RUN_BOUND_KEYS, TOPOLOGY_BOUND_KEYS, ParallelGroups, TrainingState

_LAZY = {
    "combine": "fingerprints",
    "differences": "fingerprints",
    "fingerprint": "fingerprints",
    "ShardedObject": "sharding",
    "ShardedTensor": "sharding",
    "ShardingIntegrityError": "sharding",
    "validate_sharding_integrity": "sharding",
    "GENERATION_PREFIX": "training",
    "RUN_BOUND_KEYS": "training",
    "TOPOLOGY_BOUND_KEYS": "training",
    "ParallelGroups": "training",
    "TrainingState": "training",
}


def __getattr__(name: str):
    if name in _LAZY:
        value = getattr(importlib.import_module(f".{_LAZY[name]}", __name__), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = [
    "Coords",
    "GENERATION_PREFIX",
    "ModelSpec",
    "ParallelGroups",
    "ParamLayout",
    "RUN_BOUND_KEYS",
    "ShardedObject",
    "ShardedTensor",
    "ShardingIntegrityError",
    "TOPOLOGY_BOUND_KEYS",
    "Topology",
    "TrainingState",
    "Transition",
    "combine",
    "differences",
    "fingerprint",
    "validate_sharding_integrity",
]
