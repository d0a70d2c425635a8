"""Interop between the reference's GLOBAL/torch_dist checkpoints and megatron-core's loader, both ways.

Rank functions: train, save with one implementation, then (another job) load with the other and compare
the loaded state with training that never stopped. Each returns what happened, never raises, so the
result is reported either way."""

from __future__ import annotations

import os
from types import SimpleNamespace

import torch

from resilience.checkpoint import ReferenceBackend
from resilience.launch import run_ranks
from resilience.state import TOPOLOGY_BOUND_KEYS, ModelSpec, Topology, TrainingState, differences, fingerprint
from resilience.state.sharding import ShardedObject, ShardedTensor
from resilience.state.training import RNG_KEY
from resilience.vocab import Combination

SPEC = ModelSpec(num_layers=2, hidden=16, ffn_hidden=32, heads=2, vocab=50, optimizer="distributed")
COMBO = Combination.parse("GLOBAL/torch_dist/sync")
STEPS = 3


def _writer(name: str):
    if name == "reference":
        return ReferenceBackend(COMBO)
    from resilience.backends.megatron import MegatronBackend

    return MegatronBackend(COMBO)


def save_rank(ctx, writer: str, topo: Topology, root: str) -> None:
    state = TrainingState(SPEC, topo, ctx.rank)
    state.train(STEPS)
    _writer(writer).save(state, root)


def tensors_exact(state: TrainingState) -> bool:
    """Every tensor record equals training that never stopped, on this rank."""
    fresh = TrainingState(SPEC, state.topo, state.coords.rank, state.groups)
    fresh.train(STEPS)
    want = {r.key: r.data for r in fresh.sharded_state_dict() if isinstance(r, ShardedTensor)}
    return all(torch.equal(r.data, want[r.key]) for r in state.sharded_state_dict() if isinstance(r, ShardedTensor))


def _megatron_strategy_load(state: TrainingState, folder: str, objects: bool = True) -> dict:
    """megatron-core's torch_dist sharded-strategy loader alone (no common.pt step)."""
    from megatron.core.dist_checkpointing.serialization import get_default_load_sharded_strategy

    from resilience.backends.megatron import MegatronBackend, megatron_calls

    backend = MegatronBackend(COMBO)
    records = [r for r in state.sharded_state_dict() if r.key != RNG_KEY and (objects or isinstance(r, ShardedTensor))]
    sd, buffers = backend.sharded_state_dict(state, records, for_load=True)
    sd.pop("args")
    with megatron_calls():
        loaded = get_default_load_sharded_strategy(folder).load(sd, folder)
    for r in records:
        if isinstance(r, ShardedTensor) and loaded.get(r.key) is not None:
            if r.key in buffers:
                lo = buffers[r.key][1]
                r.data.copy_(loaded[r.key][lo : lo + r.data.shape[0]])
            else:
                r.data.copy_(loaded[r.key])
    objects = {r.key: loaded.get(r.key) for r in records if isinstance(r, ShardedObject)}
    state.load_objects(objects)
    return objects


def load_rank(ctx, reader: str, topo: Topology, root: str, saved_topo: Topology) -> dict:
    """Load with `reader`: first its ordinary loader, then (if that refuses) the format-level reader
    alone; report each step."""
    steps = []
    state = TrainingState(SPEC, topo, ctx.rank)
    root = os.path.abspath(root)
    try:
        if reader == "megatron":
            from resilience.backends.megatron import MegatronBackend, iter_folder, read_tracker

            try:
                MegatronBackend(COMBO).load(state, root)
                steps.append("MegatronBackend.load (dist_checkpointing.load): loaded")
            except Exception as e:
                steps.append(f"MegatronBackend.load (dist_checkpointing.load) failed: {_short(e)}")
                state = TrainingState(SPEC, topo, ctx.rank)
                folder = iter_folder(root, read_tracker(root))
                try:
                    objects = _megatron_strategy_load(state, folder)
                    steps.append(
                        f"torch_dist sharded strategy alone: loaded, objects came back as "
                        f"{sorted({type(v).__name__ for v in objects.values()})}"
                    )
                except Exception as e2:
                    steps.append(f"torch_dist sharded strategy alone failed: {_short(e2)}")
                    state = TrainingState(SPEC, topo, ctx.rank)
                    _megatron_strategy_load(state, folder, objects=False)
                    steps.append(f"tensors only: loaded, tensors exact: {tensors_exact(state)}")
                    return {"ok": False, "steps": steps, "tensors_exact": tensors_exact(state)}
        else:
            try:
                ReferenceBackend(COMBO).load(state, root)
                steps.append("ReferenceBackend.load: loaded")
            except Exception as e:
                steps.append(f"ReferenceBackend.load refused: {_short(e)}")
                from resilience.backends.megatron import iter_folder, read_tracker
                from resilience.checkpoint.formats.base import RankInfo
                from resilience.checkpoint.formats.torch_dist import TorchDistFormat

                state = TrainingState(SPEC, topo, ctx.rank)
                info = RankInfo(ctx.rank, topo.world, topo, state.coords, SPEC, COMBO, None, state.groups.dp_group)
                folder = iter_folder(root, read_tracker(root))
                objects = TorchDistFormat().read(
                    info, state.sharded_state_dict(), folder, SimpleNamespace(topology=saved_topo.to_dict())
                )
                kinds = sorted({type(v).__name__ for v in objects.values()})
                try:
                    state.load_objects(objects)
                    steps.append(f"TorchDistFormat.read alone: loaded, objects as {kinds}")
                except Exception as e2:
                    steps.append(
                        f"TorchDistFormat.read alone: tensors read (exact: {tensors_exact(state)}), "
                        f"objects as {kinds}: {_short(e2)}"
                    )
                    state.load_objects(
                        {k: v[0] if isinstance(v, list) and len(v) == 1 else v for k, v in objects.items()}
                    )
                    steps.append("with each object taken out of its one-element list: loaded")
    except BaseException as e:
        steps.append(f"failed: {_short(e)}")
        return {"ok": False, "steps": steps}
    fresh = TrainingState(SPEC, topo, ctx.rank, state.groups)
    fresh.train(STEPS)
    differ = differences(
        fingerprint(state.sharded_state_dict()), fingerprint(fresh.sharded_state_dict()), TOPOLOGY_BOUND_KEYS
    )
    # equal to a fresh run trained to the same iteration on this topology: every key of the global state
    return {
        "ok": True,
        "steps": steps,
        "iteration": state.iteration,
        "exact": not differ,
        "tensors_exact": tensors_exact(state),
        "differ": differ,
    }


def _short(e: BaseException) -> str:
    return f"{type(e).__name__}: {str(e).splitlines()[0][:300] if str(e) else ''}"


def interop(writer: str, reader: str, root: str, save_topo: Topology, load_topo: Topology) -> dict:
    """Save with `writer` on save_topo, load with `reader` on load_topo; rank 0's answer."""
    run_ranks(save_rank, save_topo.world, args=(writer, save_topo, root), timeout=180)
    return run_ranks(load_rank, load_topo.world, args=(reader, load_topo, root, save_topo), timeout=180)[0]
