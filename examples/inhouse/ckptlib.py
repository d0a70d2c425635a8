"""ckptlib: a team's own checkpoint library, as many teams write one. It knows nothing of any test framework.

    ckptlib.save(shard, root, iteration, metadata)     # every rank, collective
    iteration, shard, index = ckptlib.load(root)       # every rank: the latest checkpoint
    ckptlib.iterations(root)                           # one process: what is on disk, newest first

Every rank `torch.save`s its shard (a dict of tensors and plain values) to `root/iter_N/rank_R.pt`; after a
barrier rank 0 writes `root/iter_N/index.json` (iteration, world size, the caller's metadata) and
`root/latest.txt` (the iteration). Plain `open()`: no temporary file, no rename, no fsync, no checksum.
A load reads `latest.txt`, then this rank's file; it needs the world size that saved."""

from __future__ import annotations

import json
import os

import torch
import torch.distributed as dist

LATEST = "latest.txt"
INDEX = "index.json"


class CheckpointError(Exception):
    """A checkpoint that is there but cannot be read."""


def _rank_and_world() -> tuple[int, int]:
    if dist.is_available() and dist.is_initialized():
        return dist.get_rank(), dist.get_world_size()
    return 0, 1


def _barrier() -> None:
    if dist.is_available() and dist.is_initialized():
        dist.barrier()


def folder_of(root: str, iteration: int) -> str:
    return os.path.join(root, f"iter_{iteration}")


def save(shard: dict, root: str, iteration: int, metadata: dict | None = None) -> str:
    """Save this rank's shard as iteration `iteration`; every rank calls it. Returns the folder."""
    rank, world = _rank_and_world()
    folder = folder_of(root, iteration)
    os.makedirs(folder, exist_ok=True)
    torch.save(shard, os.path.join(folder, f"rank_{rank}.pt"))
    _barrier()
    if rank == 0:
        with open(os.path.join(folder, INDEX), "w") as f:
            json.dump({"iteration": iteration, "world_size": world, "metadata": metadata or {}}, f)
        with open(os.path.join(root, LATEST), "w") as f:
            f.write(str(iteration))
    _barrier()
    return folder


def latest(root: str) -> int | None:
    """The iteration latest.txt names, or None when there is no latest.txt."""
    path = os.path.join(root, LATEST)
    if not os.path.exists(path):
        return None
    with open(path) as f:
        text = f.read().strip()
    if not text.isdigit():
        raise CheckpointError(f"{path}: not an iteration number: {text!r}")
    return int(text)


def read_index(root: str, iteration: int) -> dict:
    path = os.path.join(folder_of(root, iteration), INDEX)
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, ValueError) as e:
        raise CheckpointError(f"{path}: {e}") from e


def load(root: str) -> tuple[int, dict, dict]:
    """(iteration, this rank's shard, index) of the latest checkpoint. FileNotFoundError when there is
    none; CheckpointError when it cannot be read or was saved by another number of ranks."""
    iteration = latest(root)
    if iteration is None:
        raise FileNotFoundError(f"{root}: no {LATEST}")
    index = read_index(root, iteration)
    rank, world = _rank_and_world()
    if index.get("world_size") != world:
        raise CheckpointError(f"iteration {iteration} was saved by {index.get('world_size')} ranks, not {world}")
    path = os.path.join(folder_of(root, iteration), f"rank_{rank}.pt")
    try:
        shard = torch.load(path, weights_only=True)
    except Exception as e:  # torch raises many kinds for a damaged file
        raise CheckpointError(f"{path}: {type(e).__name__}: {e}") from e
    return iteration, shard, index


def iterations(root: str) -> list[int]:
    """Every iter_N folder under root, newest first."""
    names = os.listdir(root) if os.path.isdir(root) else []
    return sorted((int(n[5:]) for n in names if n.startswith("iter_") and n[5:].isdigit()), reverse=True)
