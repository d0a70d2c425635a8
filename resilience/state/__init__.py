"""Topology, model spec and the sharded training state every scenario checkpoints."""

from .fingerprint import combine, differences, fingerprint
from .model import ModelSpec, ParamLayout
from .sharding import ShardedObject, ShardedTensor, ShardingIntegrityError, validate_sharding_integrity
from .topology import Coords, Topology, Transition
from .training import GENERATION_PREFIX, RUN_BOUND_KEYS, TOPOLOGY_BOUND_KEYS, ParallelGroups, TrainingState

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
