"""LEGACY + torch: Megatron's legacy layout, one torch.save file per (tp, pp), written by dp rank 0.

iter_NNNNNNN/mp_rank_TT[_PPP]/model_optim_rng.pt (+ distrib_optim.pt with the distributed optimizer
state gathered from every dp rank). A model with experts writes their state apart, one file per place of
the expert grid (etp, pp, ep) in mp_rank_TT_PPP_EEE (TT the etp rank), by expert-data-parallel rank 0:
every dense piece and every expert piece is then written once, whatever tp, ep and etp are (a file per
(tp, pp, ep) written by expert-data-parallel rank 0 misses tp ranks when tp > ep x etp).
Loads when dp or cp changes; tp, pp, vpp, ep or etp changes are refused."""

from __future__ import annotations

import os
from typing import Any

import torch
import torch.distributed as dist

from ... import storage
from ...errors import TopologyChangeRefused
from ...state import Topology
from ...state.model import is_expert_key
from ...state.sharding import ShardedTensor
from . import torchfile
from .base import RankInfo

MODEL_FILE = "model_optim_rng.pt"
DIST_OPT_FILE = "distrib_optim.pt"


def rank_folder(tp: int, pp: int, topo: Topology) -> str:
    return f"mp_rank_{tp:02d}" + (f"_{pp:03d}" if topo.pp > 1 else "")


def expert_folder(etp: int, pp: int, ep: int) -> str:
    return f"mp_rank_{etp:02d}_{pp:03d}_{ep:03d}"


class LegacyFormat:
    layout = "global"

    def write(self, info: RankInfo, records, folder: str) -> None:
        c, topo = info.coords, info.topo
        dense = [r for r in records if not is_expert_key(r.key)]
        self._write_part(info, dense, folder, rank_folder(c.tp, c.pp, topo), c.dpcp, topo.dpcp, info.dp_group)
        if info.spec.num_experts:  # after the dense part: every rank runs the collectives in one order
            experts = [r for r in records if isinstance(r, ShardedTensor) and is_expert_key(r.key)]
            self._write_part(info, experts, folder, expert_folder(c.etp, c.pp, c.ep), c.edp, topo.edp, info.edp_group)

    def _write_part(self, info: RankInfo, records, folder: str, sub: str, my_rank: int, size: int, group) -> None:
        """Rank 0 of the group that holds these records whole (or, distributed-optimizer state, in rows
        gathered over that group) writes them."""
        dist_opt = info.spec.optimizer == "distributed"
        model, optim = {}, {}
        for r in records:
            if isinstance(r, ShardedTensor):
                if dist_opt and r.key.startswith("optimizer.") and r.data.dim():  # rows split over the group
                    optim[r.key] = self._gather_rows(r, size, group)
                else:
                    model[r.key] = torchfile.entry(r)
        if my_rank != 0:
            return
        sub = os.path.join(folder, sub)
        storage.current().mkdir(sub)
        torchfile.save(os.path.join(sub, MODEL_FILE), model, torchfile.objects_of(records))
        if dist_opt:
            torchfile.save(os.path.join(sub, DIST_OPT_FILE), optim, {})

    @staticmethod
    def _gather_rows(r: ShardedTensor, size: int, group) -> dict:
        """Distributed optimizer: gather every rank's rows of this piece to rank 0 of its group."""
        if size == 1 or group is None:
            return torchfile.entry(r)
        pieces: list[Any] = [None] * size
        dist.all_gather_object(pieces, (list(r.global_offset), r.data.detach()), group=group)
        pieces.sort(key=lambda p: p[0][0])
        data = torch.cat([p[1] for p in pieces], dim=0)
        return torchfile.entry(r, data, pieces[0][0])

    def check_topology(self, saved: Topology, info: RankInfo) -> None:
        cur = info.topo
        changed = [
            f"{d} {getattr(saved, d)} -> {getattr(cur, d)}"
            for d in ("tp", "pp", "vpp", "ep", "etp")
            if getattr(saved, d) != getattr(cur, d)
        ]
        if changed:
            raise TopologyChangeRefused(
                f"LEGACY/torch checkpoint saved on {saved} cannot load on {cur}: {', '.join(changed)}. "
                f"Legacy files hold one whole (tp, pp) piece each, the layers of its chunks (and one (etp, pp, ep) "
                f"piece of the experts), and cannot be resharded; only dp and cp may change. "
                f"Save with GLOBAL/torch_dist or TORCH_DCP/torch_dcp to change tp or pp."
            )

    def reader_of(self, rel: str, info: RankInfo) -> int | None:
        """The rank that hashes file `rel` on load and reads it from memory: dp rank 0 of its (tp, pp), or
        expert-data-parallel rank 0 of its place (etp, pp, ep) in the expert grid."""
        t = info.topo
        head = rel.split("/", 1)[0]
        for pp in range(t.pp):
            for tp in range(t.tp):
                if head == rank_folder(tp, pp, t):
                    return t.rank_of(tp, pp, 0)
            for etp in range(t.etp if info.spec.num_experts else 0):
                for ep in range(t.ep):
                    if head == expert_folder(etp, pp, ep):
                        return t.expert_rank_of(etp, ep, 0, pp)
        return None

    def read(self, info: RankInfo, records, folder: str, manifest) -> dict:
        c = info.coords
        dense = [r for r in records if not is_expert_key(r.key)]
        objects = self._read_part(dense, os.path.join(folder, rank_folder(c.tp, c.pp, info.topo)))
        if info.spec.num_experts:
            experts = [r for r in records if is_expert_key(r.key)]
            self._read_part(experts, os.path.join(folder, expert_folder(c.etp, c.pp, c.ep)))
        return objects  # same tp and pp: the RNG of this (tp, pp) is exact

    @staticmethod
    def _read_part(records, sub: str) -> dict:
        doc = torchfile.load(os.path.join(sub, MODEL_FILE))
        tensors = dict(doc["tensors"])
        dist_file = os.path.join(sub, DIST_OPT_FILE)
        if storage.current().exists(dist_file):
            tensors.update(torchfile.load(dist_file)["tensors"])
        torchfile.fill(records, tensors, sub)
        return dict(doc["objects"])
