"""What a checkpoint format does: write one rank's records into a folder, read them back.

The driver (reference.ReferenceBackend) owns staging, manifests, checksums, commit and fallback; a
format only lays bytes out. Every call is made on every rank, in the same order."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol

from ...state import ModelSpec, Topology
from ...state.sharding import Record
from ...state.topology import Coords
from ...vocab.combos import Combination
from ..manifest import Manifest


@dataclass
class RankInfo:
    """Who is writing or reading: this rank, the job's topology, and the groups it may use."""

    rank: int
    world: int
    topo: Topology
    coords: Coords
    spec: ModelSpec
    combo: Combination
    group: Any = None  # process group for the format's collectives (a dedicated one for async writes)
    dp_group: Any = None  # this rank's data-parallel group (legacy gathers the distributed optimizer)
    edp_group: Any = None  # its expert-data-parallel group (the same, for the experts' optimizer state)

    @classmethod
    def of(cls, state, combo: Combination, group: Any = None) -> RankInfo:
        """This rank's info for `state` (a TrainingState): its topology, place and process groups."""
        from ...dist import this_rank, world_size

        groups = state.groups
        return cls(
            this_rank(),
            world_size(),
            state.topo,
            state.coords,
            state.spec,
            combo,
            group,
            groups.dp_group,
            groups.edp_group,
        )


class Format(Protocol):
    layout: str  # "global": one folder per checkpoint; "local": one folder per rank per checkpoint

    def write(self, info: RankInfo, records: list[Record], folder: str) -> None:
        """Write this rank's share of `records` into `folder` through the storage seam."""

    def check_topology(self, saved: Topology, info: RankInfo) -> None:
        """Raise TopologyChangeRefused if a checkpoint saved on `saved` cannot load on info.topo."""

    # Optional: `reader_of(rel, info) -> int | None`, the rank that reads file `rel` of a checkpoint on
    # load; that rank hashes it and loads it from memory (checkpoint.loading.readers).
    # Optional: `collective_plan = True` when read() makes a collective plan before reading a byte (DCP's:
    # storage.dcp.SeamReader): the files are checked in that plan step and agreed on by its collective
    # (checkpoint.verified), with no collective of the loader's own before the read.

    def read(self, info: RankInfo, records: list[Record], folder: str, manifest: Manifest) -> dict[str, Any]:
        """Fill the tensors of `records` in place; return ShardedObject values by key. The RNG key is
        returned only when it can be restored exactly on this topology."""
