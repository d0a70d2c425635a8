"""The adapter that lets `resilience` test ckptlib: a CheckpointBackend (resilience.backends.CheckpointBackend).

    resilience adapter check ckptlib_resilience:factory
    resilience matrix --backend ckptlib_resilience:factory
    pytest        (pyproject.toml names the backend for the pytest plugin)

It changes nothing ckptlib decides. It turns the framework's state into ckptlib's shard and back, and
ckptlib's errors into the ones the protocol names. docs/adapters.md walks through it."""

from __future__ import annotations

import os

import ckptlib
import torch
import torch.distributed as dist

from resilience.backends import CheckpointInfo, LoadResult
from resilience.errors import CheckpointNotFound, ConfigError, IntegrityError, TopologyChangeRefused
from resilience.state import ShardedTensor

# ckptlib saves per-rank files synchronously: LOCAL/torch/sync (each rank's save is acknowledged on its own)
COMBINATIONS = ("LOCAL/torch/sync",)
# ckptlib loads only on the topology that saved (each rank reads back the file it wrote): the topology
# checker expects a clear refusal of every tp, pp and dp change
CONTRACT = {"tp": "refuse", "pp": "refuse", "dp": "refuse"}

# the errors a load may end in, and which is worse when ranks disagree (the collective raises the worst)
_OK, _NOT_FOUND, _REFUSED, _DAMAGED = 0, 1, 2, 3


class CkptlibBackend:
    name = "ckptlib"

    def __init__(self, combo):
        if str(combo) not in COMBINATIONS:
            raise ConfigError("combination", f"ckptlib does not implement {combo}", f"use {', '.join(COMBINATIONS)}")
        self.combo = combo

    def save(self, state, root: str) -> None:
        """Every record of this rank's state under its key: tensors as they are, objects as their values."""
        shard = {r.key: r.data if isinstance(r, ShardedTensor) else r.value for r in state.sharded_state_dict()}
        ckptlib.save(shard, root, state.iteration, metadata={"topology": str(state.topo)})

    def load(self, state, root: str) -> LoadResult:
        records = state.sharded_state_dict()
        code, message, found = self._read(state, root, records)
        # load is collective: when any rank cannot load, every rank raises (the worst error seen)
        worst = torch.tensor([code])
        if dist.is_available() and dist.is_initialized():
            dist.all_reduce(worst, op=dist.ReduceOp.MAX)
        if worst.item() != _OK:
            message = message or "another rank could not load"
            if worst.item() == _NOT_FOUND:
                raise CheckpointNotFound(f"{root}: {message}")
            if worst.item() == _REFUSED:
                raise TopologyChangeRefused(message)
            raise IntegrityError(root, "ckptlib load", message)
        iteration, shard = found
        objects = {}
        for r in records:
            if isinstance(r, ShardedTensor):
                r.data.copy_(shard[r.key])  # tensors are filled in place
            else:
                objects[r.key] = shard[r.key]
        state.load_objects(objects)  # iteration, optimizer step, data position, RNG
        # same topology (anything else was refused): the RNG comes back exactly
        return LoadResult(iteration, ckptlib.folder_of(root, iteration), rng_restored=True, warnings=[])

    def _read(self, state, root: str, records) -> tuple[int, str, tuple | None]:
        """(error code, message, (iteration, shard)) of this rank's part of the load; nothing filled yet."""
        try:
            iteration = ckptlib.latest(root)
            if iteration is None:
                return _NOT_FOUND, f"no {ckptlib.LATEST}", None
            # ckptlib refuses another world size with a CheckpointError; the protocol calls any topology it
            # does not load on a refusal, so the topology is compared first
            saved_on = ckptlib.read_index(root, iteration).get("metadata", {}).get("topology")
            if saved_on != str(state.topo):
                return _REFUSED, f"iteration {iteration} was saved on {saved_on}; ckptlib loads it only there", None
            iteration, shard, _ = ckptlib.load(root)
        except FileNotFoundError as e:
            return _NOT_FOUND, str(e), None
        except ckptlib.CheckpointError as e:
            return _DAMAGED, str(e), None
        for r in records:
            value = shard.get(r.key)
            if r.key not in shard:
                return _DAMAGED, f"iteration {iteration}: rank file has no {r.key!r}", None
            if isinstance(r, ShardedTensor) and not (
                isinstance(value, torch.Tensor) and value.shape == r.data.shape and value.dtype == r.data.dtype
            ):
                return _DAMAGED, f"iteration {iteration}: {r.key!r} does not fit this rank's piece", None
        return _OK, "", (iteration, shard)

    def list_checkpoints(self, root: str) -> list[CheckpointInfo]:
        """Every iter_N folder, newest first; complete once rank 0 wrote its index.json."""
        out = []
        for it in ckptlib.iterations(root):
            folder = ckptlib.folder_of(root, it)
            complete = os.path.exists(os.path.join(folder, ckptlib.INDEX))
            out.append(CheckpointInfo(it, folder, complete, problem="" if complete else f"no {ckptlib.INDEX}"))
        return out


def factory(combo) -> CkptlibBackend:
    """What `--backend ckptlib_resilience:factory` calls, in every rank process, once per combination."""
    return CkptlibBackend(combo)


factory.combinations = COMBINATIONS  # what the matrix, the pytest plugin and `adapter check` run
factory.contract = CONTRACT  # what a load on another topology must do
