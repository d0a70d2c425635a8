"""The reference checkpoint implementation of the seed's three layers."""
from .combos import CheckpointType, CkptFormat, Combination, IOMode, combination, table, valid_combinations
from .reference import CheckpointInfo, LoadResult, ReferenceBackend, list_checkpoints

__all__ = ["CheckpointInfo", "CheckpointType", "CkptFormat", "Combination", "IOMode", "LoadResult",
           "ReferenceBackend", "combination", "list_checkpoints", "table", "valid_combinations"]
