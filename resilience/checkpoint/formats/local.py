"""LOCAL + torch: each rank's own state in its own file; no collective, no rank-0 dependency."""

from __future__ import annotations

import os

from ...errors import TopologyChangeRefused
from ...state import Topology
from ...state.sharding import ShardedTensor
from . import torchfile
from .base import RankInfo

FILE = "model_optim_rng.pt"


class LocalFormat:
    layout = "local"

    def write(self, info: RankInfo, records, folder: str) -> None:
        tensors = {r.key: torchfile.entry(r) for r in records if isinstance(r, ShardedTensor)}
        torchfile.save(os.path.join(folder, FILE), tensors, torchfile.objects_of(records))

    def check_topology(self, saved: Topology, info: RankInfo) -> None:
        if saved != info.topo:
            raise TopologyChangeRefused(
                f"LOCAL/torch checkpoint saved on {saved} cannot load on {info.topo}: a local checkpoint is each "
                f"rank's own state and only loads on the identical topology. Save with GLOBAL/torch_dist or "
                f"TORCH_DCP/torch_dcp to change the topology."
            )

    def read(self, info: RankInfo, records, folder: str, manifest) -> dict:
        doc = torchfile.load(os.path.join(folder, FILE))
        torchfile.fill(records, doc["tensors"], folder)
        return dict(doc["objects"])
