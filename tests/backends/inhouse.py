"""A plain in-house checkpoint library, and its adapter: code the framework did not write.

What many teams have: every rank `torch.save`s its shard to iter_N/rank_R.pt, rank 0 then writes
index.json and latest.txt. No temp files, no fsync, no checksum, plain open() (nothing goes through
resilience.storage). Loads only on the topology it saved. Test it with
`resilience matrix --backend tests.backends.inhouse:factory`."""

from __future__ import annotations

import json
import os

import torch
import torch.distributed as dist

from resilience.dist import all_agree, barrier, this_rank
from resilience.errors import CheckpointNotFound, ConfigError, IntegrityError, TopologyChangeRefused
from resilience.state.sharding import ShardedTensor
from resilience.vocab import CheckpointInfo, LoadResult

LATEST, INDEX = "latest.txt", "index.json"


# ---- the library, as its team wrote it ---------------------------------------------------------------
def _barrier():
    if dist.is_available() and dist.is_initialized():
        dist.barrier()


def save_checkpoint(shard: dict, root: str, iteration: int, rank: int, index: dict) -> None:
    folder = os.path.join(root, f"iter_{iteration}")
    os.makedirs(folder, exist_ok=True)
    torch.save(shard, os.path.join(folder, f"rank_{rank}.pt"))
    _barrier()
    if rank == 0:
        with open(os.path.join(folder, INDEX), "w") as f:
            json.dump(dict(index, iteration=iteration), f)
        with open(os.path.join(root, LATEST), "w") as f:
            f.write(str(iteration))
    _barrier()


def read_latest(root: str) -> tuple[int, dict]:
    with open(os.path.join(root, LATEST)) as f:
        iteration = int(f.read().strip())
    with open(os.path.join(root, f"iter_{iteration}", INDEX)) as f:
        return iteration, json.load(f)


def load_shard(root: str, iteration: int, rank: int) -> dict:
    return torch.load(os.path.join(root, f"iter_{iteration}", f"rank_{rank}.pt"), weights_only=True)


# ---- the adapter (resilience.backends.base.CheckpointBackend) ----------------------------------------
class InhouseBackend:
    name = "inhouse"

    def __init__(self, combo):
        if str(combo) not in factory.combinations:
            raise ConfigError(
                "combination",
                f"the in-house library does not implement {combo}",
                f"use {', '.join(factory.combinations)}",
            )

    def save(self, state, root: str) -> None:
        shard = {r.key: (r.data if isinstance(r, ShardedTensor) else r.value) for r in state.sharded_state_dict()}
        save_checkpoint(shard, root, state.iteration, this_rank(), {"topology": str(state.topo)})

    def load(self, state, root: str) -> LoadResult:
        if not os.path.exists(os.path.join(root, LATEST)):
            raise CheckpointNotFound(f"{root}: no {LATEST}")
        error, iteration, index = None, None, {}
        try:
            iteration, index = read_latest(root)
        except Exception as e:  # the library's own errors: a bad checkpoint, as the protocol names it
            error = f"{type(e).__name__}: {e}"
        if not error and index.get("topology") != str(state.topo):
            raise TopologyChangeRefused(f"saved on {index.get('topology')}, cannot load on {state.topo}")
        records = state.sharded_state_dict()
        try:
            shard = load_shard(root, iteration, this_rank()) if not error else {}
            for r in records:
                value = shard.get(r.key)
                if isinstance(r, ShardedTensor) and not (
                    isinstance(value, torch.Tensor) and value.shape == r.data.shape and value.dtype == r.data.dtype
                ):
                    raise ValueError(f"{r.key}: stored piece does not fit")
        except Exception as e:
            error = error or f"{type(e).__name__}: {e}"
        if not all_agree(error is None):  # load is collective: every rank gives up together
            raise IntegrityError(root, "in-house load", error or "another rank could not load")
        objects = {}
        for r in records:
            if isinstance(r, ShardedTensor):
                r.data.copy_(shard[r.key])
            else:
                objects[r.key] = shard.get(r.key)
        state.load_objects(objects)
        return LoadResult(iteration, os.path.join(root, f"iter_{iteration}"), True, [])

    def list_checkpoints(self, root: str) -> list[CheckpointInfo]:
        names = os.listdir(root) if os.path.isdir(root) else []
        its = sorted((int(n[5:]) for n in names if n.startswith("iter_") and n[5:].isdigit()), reverse=True)
        return [
            CheckpointInfo(i, os.path.join(root, f"iter_{i}"), os.path.exists(os.path.join(root, f"iter_{i}", INDEX)))
            for i in its
        ]


def factory(combo) -> InhouseBackend:
    return InhouseBackend(combo)


factory.combinations = ("LOCAL/torch/sync",)


# ---- a variant that also writes a file no load reads -------------------------------------------------
class NotesBackend(InhouseBackend):
    """The library plus a notes.json per checkpoint that nothing ever reads back: damage there probes
    nothing, and the framework must say so rather than count it as a check."""

    def save(self, state, root: str) -> None:
        super().save(state, root)
        if this_rank() == 0:
            with open(os.path.join(root, f"iter_{state.iteration}", "notes.json"), "w") as f:
                json.dump({"note": "written, never read"}, f)
        barrier()


def with_notes(combo) -> NotesBackend:
    return NotesBackend(combo)


with_notes.combinations = factory.combinations
