"""GLOBAL + torch_dist: Megatron's sharded-tensor checkpoint, written with torch.distributed.checkpoint.

Every tensor record is saved as a piece of its global tensor (global shape and offset), and only
replica 0 of each piece is written, so each global element is stored exactly once. Vocab-parallel
tensors are saved without their padding rows: their saved shape is the logical one, the same on every
tp. Objects are saved under their unique key (key + grid position) by replica 0. Beside DCP's
`.metadata` and `__R_N.distcp` files sits Megatron's `metadata.json`.

Loading reads each local piece by its global offset, whatever pieces the checkpoint holds, so any
tp / pp / dp change loads. An object whose grid changed (RNG: (pp, tp)) is left out."""

from __future__ import annotations

import json
import os
from typing import Any

import torch
from torch.distributed.checkpoint.default_planner import DefaultSavePlanner
from torch.distributed.checkpoint.metadata import ChunkStorageMetadata, MetadataIndex, TensorProperties
from torch.distributed.checkpoint.planner import (
    LoadItemType,
    LoadPlan,
    ReadItem,
    SavePlan,
    TensorWriteData,
    WriteItem,
    WriteItemType,
)
from torch.distributed.checkpoint.planner_helpers import _create_write_items, create_read_items_for_chunk_list

from ... import storage
from ...errors import IntegrityError
from ...state import Topology, validate_sharding_integrity
from ...state.sharding import ShardedObject, ShardedTensor
from ...state.training import TOPOLOGY_BOUND_KEYS
from ...storage.dcp import SeamReader, SeamWriter
from . import dcp_steps
from .base import RankInfo
from .dcpio import (
    CheckedLoadPlanner,
    CheckpointContentError,
    check_plan,
    dcp_reader_of,
    is_bytes,
    stored_tensor,
)

METADATA_JSON = "metadata.json"
BACKEND = {"sharded_backend": "torch_dist", "sharded_backend_version": 1}


def _logical_rows(r: ShardedTensor) -> int:
    """How many leading rows of the piece hold real (not padding) elements (a tensor of no dimensions: 1)."""
    if not r.data.dim():
        return 1
    if r.logical_shape is None:
        return r.local_shape[0]
    return max(0, min(r.local_shape[0], r.logical_shape[0] - r.global_offset[0]))


class _PieceLoadPlanner(CheckedLoadPlanner):
    """Reads every target piece by its global offset; objects by key (tensor or bytes, as stored)."""

    def __init__(self, where: str, offsets: dict[str, tuple[int, ...]]) -> None:
        super().__init__(where, flatten_state_dict=False, flatten_sharded_tensors=False)
        self.offsets = offsets

    def create_local_plan(self) -> LoadPlan:
        # checked inside DCP's planning step, whose errors reach every rank: no collective of its own
        _check_backend(self.where)
        md = self.read_metadata.state_dict_metadata
        items = []
        for fqn, target in list(self.state_dict.items()):
            if fqn not in md:
                raise CheckpointContentError(f"{self.where}: the checkpoint has no {fqn!r}")
            if fqn not in self.offsets and is_bytes(self.read_metadata, fqn):
                items.append(
                    ReadItem(
                        LoadItemType.BYTE_IO,
                        MetadataIndex(fqn),
                        torch.Size((0,)),
                        MetadataIndex(fqn),
                        torch.Size((0,)),
                        torch.Size((0,)),
                    )
                )
                continue
            if fqn not in self.offsets:  # an object stored as a tensor (RNG state): read it whole
                stored = stored_tensor(self.read_metadata, fqn, self.where)
                self.state_dict[fqn] = target = torch.empty(stored.size, dtype=stored.properties.dtype)
                self.offsets[fqn] = (0,) * len(stored.size)
            chunk = ChunkStorageMetadata(torch.Size(self.offsets[fqn]), target.size())
            items += create_read_items_for_chunk_list(fqn, stored_tensor(self.read_metadata, fqn, self.where), [chunk])
        plan = LoadPlan(items)
        check_plan(plan, self.state_dict, self.read_metadata, self.where)
        return plan

    def lookup_tensor(self, index: MetadataIndex) -> torch.Tensor:
        return self.state_dict[index.fqn]  # one piece per key on a rank; read items carry local offsets


class _PieceSavePlanner(DefaultSavePlanner):
    """Writes each replica-0 piece, a plain local tensor, as a chunk of its logical global tensor: what
    DCP writes for a ShardedTensor, without gathering every rank's pieces first to build one. Before a
    byte is written the coordinator checks that the chunks of all ranks tile every tensor exactly once;
    an error there reaches every rank."""

    def __init__(self, pieces: dict[str, ShardedTensor]) -> None:
        super().__init__(flatten_state_dict=False)
        self.pieces = pieces

    def create_local_plan(self) -> SavePlan:
        items = []
        for fqn, value in self.state_dict.items():
            r = self.pieces.get(fqn)
            if r is None:
                items += _create_write_items(fqn, value)  # an object: bytes
                continue
            offset = torch.Size(r.global_offset)
            chunk = ChunkStorageMetadata(offset, value.size())
            items.append(
                WriteItem(
                    MetadataIndex(fqn, offset),
                    WriteItemType.SHARD,
                    tensor_data=TensorWriteData(chunk, TensorProperties(dtype=value.dtype), torch.Size(r.logical)),
                )
            )
        self.plan = SavePlan(items)
        return self.plan

    def create_global_plan(self, all_plans: list[SavePlan]):
        validate_sharding_integrity(
            {
                "key": i.index.fqn,
                "global_shape": list(i.tensor_data.size),  # type: ignore[union-attr]  # SHARD items have it
                "replica_id": 0,
                "global_offset": list(i.tensor_data.chunk.offsets),  # type: ignore[union-attr]
                "local_shape": list(i.tensor_data.chunk.sizes),  # type: ignore[union-attr]
            }
            for plan in all_plans
            for i in plan.items
            if i.type is WriteItemType.SHARD
        )
        return super().create_global_plan(all_plans)

    def lookup_object(self, index: MetadataIndex):
        return self.state_dict[index.fqn]  # one piece per key on a rank, looked up by its global offset


class TorchDistFormat:
    """GLOBAL/torch_dist: loads under any tp, pp and dp change."""

    layout = "global"
    collective_plan = True  # dcp.load's plan step checks the files (formats.base)
    planner = _PieceSavePlanner

    # ---- write -----------------------------------------------------------------------------------
    @staticmethod
    def pieces_to_write(records) -> tuple[dict[str, ShardedTensor], dict[str, Any]]:
        """(key -> record, key -> what DCP writes) of this rank: replica 0 of every piece, without padding
        rows; an empty piece (a distributed-optimizer shard of no rows) is not written at all."""
        pieces: dict[str, ShardedTensor] = {}
        state: dict[str, Any] = {}
        for r in records:
            if isinstance(r, ShardedTensor) and r.replica_id == 0:
                rows = _logical_rows(r)
                data = r.data.detach()[:rows] if r.data.dim() else r.data.detach()
                if data.numel():
                    pieces[r.key], state[r.key] = r, data.contiguous()
            elif isinstance(r, ShardedObject) and r.replica_id == 0:
                state[r.unique_key] = r.value  # flat keys: an object's value (a dict) is stored whole
        return pieces, state

    def write(self, info: RankInfo, records, folder: str) -> None:
        """Collective over info.group: DCP's save (dcp_steps); rank 0 adds metadata.json."""
        pieces, state = self.pieces_to_write(records)
        dcp_steps.save(state, SeamWriter(folder), self.planner(pieces), info.group, f"torch_dist save into {folder}")
        if info.rank == 0:
            with storage.current().open_write(os.path.join(folder, METADATA_JSON)) as f:
                f.write(json.dumps(BACKEND).encode())

    # ---- load ------------------------------------------------------------------------------------
    def check_topology(self, saved: Topology, info: RankInfo) -> None:
        """Every tp, pp and dp change loads."""

    def reader_of(self, rel: str, info: RankInfo) -> int | None:
        """The rank that hashes file `rel` on load and reads it from memory: its writer."""
        return dcp_reader_of(rel, info.world)

    def read(self, info: RankInfo, records, folder: str, manifest) -> dict:
        """Fill every tensor record (all replicas) from the pieces it overlaps; padding rows become zero.
        The planner checks metadata.json first."""
        saved = Topology.from_dict(manifest.topology)
        same_grid = (saved.tp, saved.pp) == (info.topo.tp, info.topo.pp)
        state: dict[str, Any] = {}
        offsets, names = {}, {}
        for r in records:
            if isinstance(r, ShardedTensor):
                rows = _logical_rows(r)
                if r.logical_shape is not None:
                    r.data[rows:].zero_()  # padding rows are not in the checkpoint
                if r.data.numel() and rows:
                    state[r.key] = r.data[:rows] if r.data.dim() else r.data
                    offsets[r.key] = tuple(r.global_offset)
            elif isinstance(r, ShardedObject):
                if r.key in TOPOLOGY_BOUND_KEYS and not same_grid:
                    continue  # saved for another (pp, tp) grid: not restorable here
                state[r.unique_key] = None
                names[r.unique_key] = r.key
        planner = _PieceLoadPlanner(folder, offsets)
        what = f"torch_dist load from {folder}"
        dcp_steps.load(state, SeamReader(folder), planner, info.group, what, keys=list(state))
        return {names[k]: v for k, v in planner.state_dict.items() if k in names}


def _check_backend(folder: str) -> None:
    """metadata.json names torch_dist (every rank reads it)."""
    path = os.path.join(folder, METADATA_JSON)
    fs = storage.current()
    if not fs.exists(path):
        raise IntegrityError(path, "file present", "a torch_dist checkpoint needs metadata.json")
    with fs.open_read(path) as f:
        raw = f.read()
    try:
        doc = json.loads(raw.decode("utf-8"))
    except (ValueError, UnicodeDecodeError) as e:
        raise IntegrityError(path, "parse", f"{type(e).__name__}: {e}") from None
    if not isinstance(doc, dict) or doc.get("sharded_backend") != "torch_dist":
        raise IntegrityError(path, "sharded_backend", f"expected torch_dist, found {doc!r}")
