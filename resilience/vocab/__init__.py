"""The words every part of the package shares, below all of them: combinations, the named phases of a
save, what a backend answers (LoadResult, CheckpointInfo), the names of checkpoint folders and files,
the manifest's format, versions. Nothing here implements a checkpoint; the reference (checkpoint/),
the adapters (backends/), the faults and the checkers all import it alike."""

from .combos import CheckpointType, CkptFormat, Combination, IOMode, combination, table, valid_combinations
from .phases import PHASES
from .results import CheckpointInfo, LoadResult, on_every_rank
from .versions import versions

__all__ = [
    "PHASES",
    "CheckpointInfo",
    "CheckpointType",
    "CkptFormat",
    "Combination",
    "IOMode",
    "LoadResult",
    "combination",
    "on_every_rank",
    "table",
    "valid_combinations",
    "versions",
]
