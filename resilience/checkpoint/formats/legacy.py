"""LEGACY + torch: Megatron's legacy layout, one torch.save file per (tp, pp), written by dp rank 0.

iter_NNNNNNN/mp_rank_TT[_PPP]/model_optim_rng.pt (+ distrib_optim.pt with the distributed optimizer
state gathered from every dp rank). Loads when dp changes; tp or pp changes are refused."""

from __future__ import annotations

import os
from typing import Any

import torch
import torch.distributed as dist

from ... import storage
from ...errors import TopologyChangeRefused
from ...state import Topology
from ...state.sharding import ShardedTensor
from . import torchfile
from .base import RankInfo

MODEL_FILE = "model_optim_rng.pt"
DIST_OPT_FILE = "distrib_optim.pt"


def rank_folder(tp: int, pp: int, topo: Topology) -> str:
    return f"mp_rank_{tp:02d}" + (f"_{pp:03d}" if topo.pp > 1 else "")


class LegacyFormat:
    layout = "global"

    def write(self, info: RankInfo, records, folder: str) -> None:
        c = info.coords
        dist_opt = info.spec.optimizer == "distributed"
        model, optim = {}, {}
        for r in records:
            if isinstance(r, ShardedTensor):
                if dist_opt and r.key.startswith("optimizer."):
                    optim[r.key] = self._gather_rows(info, r)
                else:
                    model[r.key] = torchfile.entry(r)
        if c.dpcp != 0:
            return
        sub = os.path.join(folder, rank_folder(c.tp, c.pp, info.topo))
        storage.current().mkdir(sub)
        torchfile.save(os.path.join(sub, MODEL_FILE), model, torchfile.objects_of(records))
        if dist_opt:
            torchfile.save(os.path.join(sub, DIST_OPT_FILE), optim, {})

    def _gather_rows(self, info: RankInfo, r: ShardedTensor) -> dict:
        """Distributed optimizer: gather every dp rank's rows of this piece to dp rank 0."""
        if info.topo.dpcp == 1 or info.dp_group is None:
            return torchfile.entry(r)
        pieces: list[Any] = [None] * info.topo.dpcp
        dist.all_gather_object(pieces, (list(r.global_offset), r.data.detach()), group=info.dp_group)
        pieces.sort(key=lambda p: p[0][0])
        data = torch.cat([p[1] for p in pieces], dim=0)
        return torchfile.entry(r, data, pieces[0][0])

    def check_topology(self, saved: Topology, info: RankInfo) -> None:
        cur = info.topo
        changed = [
            f"{d} {getattr(saved, d)} -> {getattr(cur, d)}"
            for d in ("tp", "pp", "vpp")
            if getattr(saved, d) != getattr(cur, d)
        ]
        if changed:
            raise TopologyChangeRefused(
                f"LEGACY/torch checkpoint saved on {saved} cannot load on {cur}: {', '.join(changed)}. "
                f"Legacy files hold one whole (tp, pp) piece each, the layers of its chunks, and cannot be resharded; "
                f"only dp and cp may change. "
                f"Save with GLOBAL/torch_dist or TORCH_DCP/torch_dcp to change tp or pp."
            )

    def reader_of(self, rel: str, info: RankInfo) -> int | None:
        """The rank that hashes file `rel` on load and reads it from memory: dp rank 0 of its (tp, pp)."""
        t = info.topo
        head = rel.split("/", 1)[0]
        for tp in range(t.tp):
            for pp in range(t.pp):
                if head == rank_folder(tp, pp, t):
                    return t.rank_of(tp, pp, 0)
        return None

    def read(self, info: RankInfo, records, folder: str, manifest) -> dict:
        c = info.coords
        sub = os.path.join(folder, rank_folder(c.tp, c.pp, info.topo))
        doc = torchfile.load(os.path.join(sub, MODEL_FILE))
        tensors = dict(doc["tensors"])
        dist_file = os.path.join(sub, DIST_OPT_FILE)
        if storage.current().exists(dist_file):
            tensors.update(torchfile.load(dist_file)["tensors"])
        torchfile.fill(records, tensors, sub)
        return dict(doc["objects"])  # same tp and pp: the RNG of this (tp, pp) is exact
