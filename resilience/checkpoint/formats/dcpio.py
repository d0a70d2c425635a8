"""What the two DCP-based formats share: load plans that are
checked for full coverage and dtype (DCP checks neither), and objects loaded with weights_only=True."""

from __future__ import annotations

import re
from collections.abc import Callable
from math import prod
from typing import Any

import torch
from torch.distributed.checkpoint.default_planner import DefaultLoadPlanner
from torch.distributed.checkpoint.metadata import (
    BytesStorageMetadata,
    ChunkStorageMetadata,
    Metadata,
    MetadataIndex,
    TensorStorageMetadata,
)
from torch.distributed.checkpoint.planner import LoadItemType, LoadPlan, ReadItem
from torch.distributed.checkpoint.planner_helpers import _create_read_items, create_read_items_for_chunk_list

from ...errors import ResilienceError
from ...storage import torch_load


class CheckpointContentError(ResilienceError, ValueError):
    """The checkpoint does not hold what this rank needs. A plain one-message exception: DCP pickles
    exceptions raised inside its steps to send them to the coordinator, so it keeps one argument."""


def stored_tensor(metadata: Metadata, fqn: str, where: str) -> TensorStorageMetadata:
    """The checkpoint's metadata of tensor `fqn`, or CheckpointContentError naming what is wrong."""
    md = metadata.state_dict_metadata.get(fqn)
    if md is None:
        raise CheckpointContentError(f"{where}: the checkpoint has no {fqn!r}")
    if not isinstance(md, TensorStorageMetadata):
        raise CheckpointContentError(f"{where}: {fqn!r} is stored as an object, not a tensor")
    return md


def check_dtype(md: TensorStorageMetadata, fqn: str, dtype: torch.dtype, where: str) -> None:
    # DCP would copy_ across dtypes without a word (fp32 into bf16)
    if md.properties.dtype != dtype:
        raise CheckpointContentError(f"{where}: {fqn}: stored as {md.properties.dtype}, expected {dtype}")


def _local_numel(value: torch.Tensor) -> int:
    local = value.to_local() if hasattr(value, "to_local") else value
    return local.numel()


def check_plan(plan: LoadPlan, targets: dict[str, Any], metadata: Metadata, where: str) -> None:
    """Every element of every tensor target is read exactly once, from a tensor of the same dtype."""
    read: dict[str, int] = {}
    for item in plan.items:
        if item.type is not LoadItemType.BYTE_IO:
            read[item.dest_index.fqn] = read.get(item.dest_index.fqn, 0) + prod(item.lengths)
    for fqn, value in targets.items():
        if not isinstance(value, torch.Tensor):
            continue
        md = stored_tensor(metadata, fqn, where)
        check_dtype(md, fqn, value.dtype, where)
        want, got = _local_numel(value), read.get(fqn, 0)
        if want != got:
            raise CheckpointContentError(
                f"{where}: {fqn}: the checkpoint covers {got} of the {want} elements this rank needs"
            )


def _set_path(root: dict, path, value) -> None:
    for step in path[:-1]:
        root = root[step]
    root[path[-1]] = value


Targets = Callable[[dict, Metadata], dict[str, tuple[int, ...]]]


class CheckedLoadPlanner(DefaultLoadPlanner):
    """DCP's default load planner, refusing plans that leave a target partly unread or read another
    dtype, and loading objects with weights_only=True.

    `targets(state_dict, metadata)`, when given, puts the load targets into the (empty) state dict
    passed to dcp.load, from the metadata DCP read: inside DCP's planning step, whose errors reach every
    rank, so making them needs no collective of its own. It returns the global offset of each target
    that is a piece of its saved tensor: a plain tensor, read by that offset (no DTensor to build, nor to
    unwrap for every read item). The filled state dict is `original_state_dict`."""

    def __init__(self, where: str, targets: Targets | None = None, **kwargs) -> None:
        super().__init__(**kwargs)
        self.where = where
        self.targets = targets
        self.pieces: dict[str, tuple[int, ...]] = {}

    def set_up_planner(self, state_dict, metadata=None, is_coordinator: bool = False) -> None:
        if self.targets is not None:
            if metadata is None:
                raise CheckpointContentError(f"{self.where}: planning began before the metadata was read")
            self.pieces = self.targets(state_dict, metadata)
        super().set_up_planner(state_dict, metadata, is_coordinator)

    def lookup_tensor(self, index: MetadataIndex) -> torch.Tensor:
        if index.fqn in self.pieces:
            return self.state_dict[index.fqn]  # its read items carry offsets inside the piece
        return super().lookup_tensor(index)

    @property
    def read_metadata(self) -> Metadata:
        """The checkpoint's metadata: DCP hands it over in set_up_planner, before any plan is made."""
        if self.metadata is None:
            raise CheckpointContentError(f"{self.where}: planning began before the metadata was read")
        return self.metadata

    def create_local_plan(self) -> LoadPlan:
        plan = LoadPlan(self._items()) if self.pieces else super().create_local_plan()
        check_plan(plan, self.state_dict, self.read_metadata, self.where)
        return plan

    def _items(self) -> list[ReadItem]:
        """Read items for every target: pieces by their offset, anything else whole, as DCP plans it."""
        items: list[ReadItem] = []
        for fqn, value in self.state_dict.items():
            offset = self.pieces.get(fqn)
            if offset is not None:
                chunk = ChunkStorageMetadata(torch.Size(offset), value.size())
                items += create_read_items_for_chunk_list(
                    fqn, stored_tensor(self.read_metadata, fqn, self.where), [chunk]
                )
                continue
            md = self.read_metadata.state_dict_metadata.get(fqn)
            if md is None:
                raise CheckpointContentError(f"{self.where}: the checkpoint has no {fqn!r}")
            if isinstance(md, TensorStorageMetadata) and isinstance(value, torch.Tensor) and md.size != value.size():
                raise CheckpointContentError(
                    f"{self.where}: {fqn}: stored as {tuple(md.size)}, expected {tuple(value.size())}"
                )
            items += _create_read_items(fqn, md, value)
        return items

    def load_bytes(self, read_item, value) -> None:
        obj = torch_load.load(value)  # weights only; in place when the reader gives it a buffer of its own
        if self.flatten_state_dict:
            _set_path(self.original_state_dict, self.mappings[read_item.dest_index.fqn], obj)
        else:
            self.state_dict[read_item.dest_index.fqn] = obj


_DATA_FILE = re.compile(r"__(\d+)_\d+\.distcp")


def dcp_reader_of(rel: str, world: int) -> int | None:
    """The rank that wrote DCP data file `rel` (`__R_N.distcp`), if it is in this world: on an unchanged
    topology it is the one that reads it."""
    m = _DATA_FILE.fullmatch(rel)
    if m is None or int(m.group(1)) >= world:
        return None
    return int(m.group(1))


def is_bytes(metadata: Metadata, fqn: str) -> bool:
    return isinstance(metadata.state_dict_metadata.get(fqn), BytesStorageMetadata)
