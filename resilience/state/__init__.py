"""Topology, model spec and the sharded training state every scenario checkpoints."""
from .fingerprint import combine, differences, fingerprint
from .model import ModelSpec, ParamLayout
from .sharding import ShardedObject, ShardedTensor, ShardingIntegrityError, validate_sharding_integrity
from .topology import Coords, Topology, Transition
from .training import TOPOLOGY_BOUND_KEYS, ParallelGroups, TrainingState

__all__ = ["Coords", "ModelSpec", "ParallelGroups", "ParamLayout", "ShardedObject", "ShardedTensor",
           "ShardingIntegrityError", "TOPOLOGY_BOUND_KEYS", "Topology", "TrainingState", "Transition", "combine",
           "differences", "fingerprint", "validate_sharding_integrity"]
