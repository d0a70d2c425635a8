"""Rank function of the demo: train on a topology and report the global fingerprint."""

from __future__ import annotations

from typing import Any

import torch.distributed as dist

from .fingerprints import combine, fingerprint
from .model import ModelSpec
from .sharding import validate_sharding_integrity
from .topology import Topology
from .training import TOPOLOGY_BOUND_KEYS, TrainingState


def train_and_fingerprint(ctx, spec: ModelSpec, topo: Topology, steps: int) -> dict | None:
    state = TrainingState(spec, topo, ctx.rank)
    records = state.sharded_state_dict()
    described: list[Any] = [None] * ctx.world
    dist.all_gather_object(described, [r.describe() for r in records])
    if ctx.rank == 0:
        validate_sharding_integrity(d for per_rank in described for d in per_rank)
    state.train(steps)
    digests = fingerprint(state.sharded_state_dict())
    if ctx.rank != 0:
        return None
    return {"fingerprint": combine(digests, TOPOLOGY_BOUND_KEYS), "keys": len(digests), "iteration": state.iteration}
