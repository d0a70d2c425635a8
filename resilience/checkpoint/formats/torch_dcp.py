"""TORCH_DCP + torch_dcp: DCP's own object-graph checkpoint.

The state is a nested dict {"model": {...}, "optimizer": {...}, "scheduler": {...}, "iteration": n,
"data": {...}, "rng": {...}} (a record key is split at its first dot) whose tensors are DTensors on the
(dp, tp) device mesh of the rank's pipeline stage: Replicate over dp, Shard(tp dim) over tp. An expert's
tensors are DTensors on the (edp, etp) mesh of its place in the expert grid: Replicate over expert data
parallel, Shard over etp. DCP deduplicates the replicas and reshards on load.

Distributed-optimizer state (each dp rank holds some rows of a tp piece; of an expert's piece, each
expert-data-parallel rank) is gathered over that group to the whole piece before saving and sliced after
loading, as DCP users do. When a tp change changes the
padded vocabulary's size, that tensor is loaded whole at its saved shape and its real rows are copied.
RNG is saved per (pp, tp) grid cell and restored only on the same grid."""

from __future__ import annotations

import copy
import functools
from collections.abc import Callable
from typing import Any

import torch
import torch._dynamo  # noqa: F401  DTensor imports it on first use (~1.5 s): a parent that forks ranks pays once
import torch.distributed as dist
from torch.distributed.checkpoint.default_planner import DefaultSavePlanner
from torch.distributed.device_mesh import DeviceMesh, init_device_mesh
from torch.distributed.tensor import DTensor, Replicate, Shard

from ...dist import is_distributed
from ...state import Topology
from ...state.model import is_expert_key
from ...state.sharding import ShardedObject, ShardedTensor
from ...state.training import RNG_KEY
from ...storage.dcp import SeamReader, SeamWriter
from . import dcp_steps
from .base import RankInfo
from .dcpio import (
    CheckedLoadPlanner,
    CheckpointContentError,
    check_dtype,
    dcp_reader_of,
    stored_tensor,
)

OPTIMIZER = "optimizer."


def nest(state: dict, key: str, value) -> None:
    head, _, rest = key.partition(".")
    if rest:
        state.setdefault(head, {})[rest] = value
    else:
        state[key] = value


def get_nested(state: dict, key: str):
    head, _, rest = key.partition(".")
    return state[head][rest] if rest else state[key]


def rng_path(info: RankInfo) -> str:
    """Where this rank's RNG goes in the state dict: one cell per (pp, tp) of the grid."""
    return f"{RNG_KEY}.pp{info.coords.pp}_tp{info.coords.tp}"


def rng_cells(topo: Topology) -> set[str]:
    """Every RNG cell (rng_path) of the (pp, tp) grid of `topo`."""
    return {f"{RNG_KEY}.pp{p}_tp{t}" for p in range(topo.pp) for t in range(topo.tp)}


def object_targets(info: RankInfo, records, state: dict, *, rng: bool) -> dict[str, str]:
    """Put a load target for every object record into `state`; returns record key -> its path there.
    The RNG is loaded only when `rng`: when it was saved on this (pp, tp) grid, the only topology on
    which it can be restored exactly (the caller knows from what it read of the checkpoint)."""
    names: dict[str, str] = {}
    for r in records:
        if not isinstance(r, ShardedObject):
            continue
        if r.key == RNG_KEY:
            if not rng:
                continue  # saved for another (pp, tp) grid: not restorable here
            names[r.key] = rng_path(info)
        else:
            names[r.key] = r.key
        value = torch.empty_like(r.value) if isinstance(r.value, torch.Tensor) else copy.deepcopy(r.value)
        nest(state, names[r.key], value)
    return names


def _strides(shape) -> tuple[int, ...]:
    out, step = [], 1
    for n in reversed(shape):
        out.append(step)
        step *= n
    return tuple(reversed(out))


class TorchDcpFormat:
    """TORCH_DCP/torch_dcp: loads under any tp, pp and dp change."""

    layout = "global"
    collective_plan = True  # dcp.load's plan step checks the files (formats.base)

    def __init__(self) -> None:
        self._mesh: DeviceMesh | None = None
        self._expert_mesh: DeviceMesh | None = None
        self._mesh_topo: Topology | None = None

    def prepare(self, info: RankInfo) -> None:
        """Collective, on every rank, on the training thread: build the device mesh (and its process
        groups) once per topology. The driver calls it before an async write starts, so the background
        writer never creates process groups while training runs collectives."""
        if not is_distributed() or self._mesh_topo == info.topo:
            return
        t = info.topo
        # "dp" is the data-parallel group context parallel widens: cp runs faster than dp in the rank order
        root = init_device_mesh("cpu", (t.pp, t.dpcp, t.tp), mesh_dim_names=("pp", "dp", "tp"))
        self._mesh, self._mesh_topo = root["dp", "tp"], t
        self._expert_mesh = None
        if info.spec.num_experts:  # the expert grid of each stage, in its rank order (etp fastest)
            grid = init_device_mesh("cpu", (t.pp, t.edp, t.ep, t.etp), mesh_dim_names=("pp", "edp", "ep", "etp"))
            self._expert_mesh = grid["edp", "etp"]

    def check_topology(self, saved: Topology, info: RankInfo) -> None:
        """Every tp, pp and dp change loads."""

    def reader_of(self, rel: str, info: RankInfo) -> int | None:
        """The rank that hashes file `rel` on load and reads it from memory: its writer."""
        return dcp_reader_of(rel, info.world)

    # ---- layout ----------------------------------------------------------------------------------
    def _split(self, info: RankInfo, records) -> dict[str, ShardedTensor]:
        """Optimizer records that hold only this rank's rows of a piece -> that piece's param: a dense
        piece's rows split over dp, an expert's over expert data parallel. Decided by topology alone, so
        every rank of a group lists the same keys in the same order."""
        if info.spec.optimizer != "distributed":
            return {}
        split_dense, split_experts = info.topo.dpcp > 1, info.topo.edp > 1
        params = {
            r.key[len("model.") :]: r for r in records if isinstance(r, ShardedTensor) and r.key.startswith("model.")
        }
        out = {}
        for r in records:
            if isinstance(r, ShardedTensor) and r.key.startswith(OPTIMIZER):
                param = params.get(r.key[len(OPTIMIZER) :].partition(".")[2])
                if param is not None and (split_experts if is_expert_key(r.key) else split_dense):
                    out[r.key] = param
        return dict(sorted(out.items()))

    def _dtensor(self, info: RankInfo, key: str, data: torch.Tensor, shape, offset):
        if self._mesh is None:
            return data  # one process: the tensor is whole
        mesh: DeviceMesh | None = self._mesh
        split_rank = info.coords.tp
        if is_expert_key(key):
            mesh, split_rank = self._expert_mesh, info.coords.etp
        dims = [d for d, (g, n) in enumerate(zip(shape, data.shape)) if g != n]
        if len(dims) > 1 or any(offset[d] != split_rank * data.shape[d] for d in dims):
            raise CheckpointContentError(
                f"piece {tuple(data.shape)} at {tuple(offset)} of {tuple(shape)} is not an even tp shard"
            )
        placements = [Replicate(), Shard(dims[0]) if dims else Replicate()]
        return DTensor.from_local(
            data, mesh, placements, run_check=False, shape=torch.Size(shape), stride=_strides(shape)
        )

    def _replica_group(self, info: RankInfo, experts: bool):
        """The group over which a piece's optimizer rows are split: dp (an expert's: expert data parallel)."""
        mesh, dim = (self._expert_mesh, "edp") if experts else (self._mesh, "dp")
        group = mesh.get_group(dim)  # type: ignore[union-attr]  # only ranks of a job, which has a mesh
        # a dimension spanning the whole world is the default group, which the training thread uses
        return info.group if group.group_name == dist.group.WORLD.group_name else group  # type: ignore[union-attr]

    # ---- write -----------------------------------------------------------------------------------
    def write(self, info: RankInfo, records, folder: str) -> None:
        """Collective over info.group (and the mesh's dp group): gather split optimizer state, then DCP's save."""
        state = self.state_dict(info, records)
        dcp_steps.save(state, SeamWriter(folder), DefaultSavePlanner(), info.group, f"torch_dcp save into {folder}")

    def state_dict(self, info: RankInfo, records) -> dict:
        """The nested DTensor state dict a DCP user saves (collective: split optimizer rows are gathered)."""
        self.prepare(info)
        split = self._split(info, records)
        whole = self.gather_split(info, records, split)
        state: dict = {}
        for r in records:
            if isinstance(r, ShardedTensor):
                if r.key in split:
                    data, offset = whole[r.key], split[r.key].global_offset
                else:
                    data, offset = r.data.detach(), r.global_offset
                nest(state, r.key, self._dtensor(info, r.key, data, r.global_shape, offset))
            elif isinstance(r, ShardedObject):
                nest(state, rng_path(info) if r.key == RNG_KEY else r.key, r.value)
        return state

    def gather_split(self, info: RankInfo, records, split: dict[str, ShardedTensor]) -> dict[str, torch.Tensor]:
        """The whole piece of every split optimizer record (collective): dense rows gathered over dp, then
        experts' over expert data parallel."""
        parts = {r.key: r for r in records if r.key in split}
        whole: dict[str, torch.Tensor] = {}
        for experts in (False, True):
            mine = {k: p for k, p in split.items() if is_expert_key(k) == experts}
            if mine:
                whole.update(self._gather_rows(info, parts, mine, experts))
        return whole

    def _gather_rows(
        self, info: RankInfo, parts: dict[str, ShardedTensor], split: dict[str, ShardedTensor], experts: bool
    ) -> dict[str, torch.Tensor]:
        """All-gather every rank's rows of each split piece over its group (as bytes, in two collectives)."""
        group = self._replica_group(info, experts)
        keys = list(split)
        bounds = torch.tensor(
            [[parts[k].global_offset[0] - split[k].global_offset[0], 0] for k in keys], dtype=torch.int64
        )
        bounds[:, 1] = bounds[:, 0] + torch.tensor([parts[k].local_shape[0] for k in keys], dtype=torch.int64)
        dp = info.topo.edp if experts else info.topo.dpcp
        all_bounds = [torch.empty_like(bounds) for _ in range(dp)]
        dist.all_gather(all_bounds, bounds, group=group)
        row_bytes = [split[k].data[0:1].numel() * parts[k].data.element_size() for k in keys]
        sizes = [sum(int(b[i, 1] - b[i, 0]) * row_bytes[i] for i in range(len(keys))) for b in all_bounds]
        send = torch.zeros(max(1, *sizes), dtype=torch.uint8)
        mine = [parts[k].data.detach().contiguous().view(-1).view(torch.uint8) for k in keys]
        if mine:
            flat = torch.cat(mine)
            send[: flat.numel()] = flat
        received = [torch.empty_like(send) for _ in range(dp)]
        dist.all_gather(received, send, group=group)
        whole = {k: torch.empty(split[k].local_shape, dtype=parts[k].data.dtype) for k in keys}
        for b, buf in zip(all_bounds, received):
            at = 0
            for i, k in enumerate(keys):
                lo, hi = int(b[i, 0]), int(b[i, 1])
                n = (hi - lo) * row_bytes[i]
                whole[k][lo:hi] = buf[at : at + n].view(whole[k].dtype).view((hi - lo,) + whole[k].shape[1:])
                at += n
        return whole

    # ---- read ------------------------------------------------------------------------------------
    def read(self, info: RankInfo, records, folder: str, manifest) -> dict:
        """Fill every tensor record from the checkpoint, resharding as needed; objects by key. The load
        targets are made inside DCP's planning step (CheckedLoadPlanner's `targets`), from the metadata
        DCP reads there: one read of it, and no collective beside DCP's own. They are plain tensors read
        by their global offsets, which is all a DTensor would tell DCP: loading needs no device mesh."""
        after: list[Callable[[], Any]] = []
        names: dict[str, str] = {}

        def targets(state: dict, metadata) -> dict[str, tuple[int, ...]]:
            saved = Topology.from_dict(manifest.topology)
            pieces = self._targets(info, records, metadata, folder, state, after)
            names.update(object_targets(info, records, state, rng=(saved.tp, saved.pp) == (info.topo.tp, info.topo.pp)))
            return pieces

        planner = CheckedLoadPlanner(folder, targets)
        dcp_steps.load({}, SeamReader(folder), planner, info.group, f"torch_dcp load from {folder}")
        for step in after:
            step()
        state = planner.original_state_dict
        return {key: get_nested(state, path) for key, path in names.items()}

    def _targets(
        self, info: RankInfo, records, metadata, folder: str, state: dict, after: list[Callable[[], Any]]
    ) -> dict[str, tuple[int, ...]]:
        """Put a load target for every tensor record into `state`, steps to finish it into `after`;
        returns each target's global offset in its saved tensor."""
        split = self._split(info, records)
        pieces: dict[str, tuple[int, ...]] = {}
        for r in records:
            if not isinstance(r, ShardedTensor):
                continue
            if r.key in split:  # load the whole tp piece, then keep this dp rank's rows
                param = split[r.key]
                buf, offset = torch.empty(param.local_shape, dtype=r.data.dtype), param.global_offset
                lo = r.global_offset[0] - offset[0]
            else:
                buf, offset, lo = r.data, r.global_offset, None
            stored = stored_tensor(metadata, r.key, folder)
            check_dtype(stored, r.key, buf.dtype, folder)
            if tuple(stored.size) == tuple(r.global_shape):
                nest(state, r.key, buf)
                pieces[r.key] = tuple(offset)
            else:
                full = torch.empty(stored.size, dtype=buf.dtype)
                self._check_padding_only(r, tuple(stored.size), folder)
                nest(state, r.key, full)
                pieces[r.key] = (0,) * full.dim()
                after.append(functools.partial(copy_real_rows, full, buf, offset, r.logical[0]))
            if lo is not None:
                after.append(functools.partial(copy_rows, r.data, buf, lo))
        return pieces

    @staticmethod
    def _check_padding_only(r: ShardedTensor, saved: tuple[int, ...], folder: str) -> None:
        """A saved shape may differ from ours only in the padding rows of a vocab-parallel tensor."""
        if r.logical_shape is None or saved[1:] != tuple(r.global_shape[1:]) or saved[0] < r.logical[0]:
            raise CheckpointContentError(f"{folder}: {r.key}: saved shape {saved} does not fit {tuple(r.global_shape)}")


def copy_real_rows(full: torch.Tensor, buf: torch.Tensor, offset, logical_rows: int) -> None:
    """buf (a piece at `offset` of a padded tensor) <- the real rows of `full`; padding rows zero."""
    k = max(0, min(buf.shape[0], logical_rows - offset[0]))
    box = (slice(offset[0], offset[0] + k),) + tuple(slice(o, o + n) for o, n in zip(offset[1:], buf.shape[1:]))
    buf[:k].copy_(full[box])
    buf[k:].zero_()


def copy_rows(dst: torch.Tensor, whole: torch.Tensor, lo: int) -> None:
    dst.copy_(whole[lo : lo + dst.shape[0]])
