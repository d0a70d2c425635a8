"""Rank functions and helpers shared by the fault tests: real multi-rank saves under faults, and one
loader job that checks many checkpoint roots (fingerprint of what loaded vs. a fresh run to that iteration)."""

from __future__ import annotations

import importlib
import importlib.util
import os
import signal
import time

import pytest
import torch.distributed as dist

from resilience.checkpoint import ReferenceBackend, list_checkpoints
from resilience.errors import CheckpointNotFound, IntegrityError, TopologyChangeRefused
from resilience.faults import Snapshot, faults_from, inject
from resilience.launch import Job, run_ranks
from resilience.state import (
    TOPOLOGY_BOUND_KEYS,
    ModelSpec,
    ParallelGroups,
    Topology,
    TrainingState,
    combine,
    fingerprint,
)
from resilience.vocab import Combination

SPEC = ModelSpec(num_layers=2, hidden=16, ffn_hidden=32, heads=2, vocab=64)
TOPO = Topology(2, 1, 1)  # both ranks write a file in every layout
WORLD = TOPO.world

_FORMAT = {"GLOBAL": "resilience.checkpoint.formats.torch_dist", "TORCH_DCP": "resilience.checkpoint.formats.torch_dcp"}


def _available(combo: str) -> str | None:
    """None if the combination's format module exists, else why the test is skipped."""
    module = _FORMAT.get(combo.split("/")[0])
    if module is None:
        return None
    if importlib.util.find_spec(module) is None:
        return f"{module} does not exist yet"
    importlib.import_module(module)  # import in the parent: forked ranks then skip DCP's imports
    return None


def combos(*names: str) -> list:
    """pytest params for combinations, skipped with the reason when their format is not written yet."""
    out = []
    for name in names:
        why = _available(name)
        out.append(pytest.param(name, id=name.replace("/", "-"), marks=[pytest.mark.skip(reason=why)] if why else []))
    return out


ALL = (
    "LEGACY/torch/sync",
    "LOCAL/torch/sync",
    "GLOBAL/torch_dist/sync",
    "GLOBAL/torch_dist/async",
    "TORCH_DCP/torch_dcp/sync",
    "TORCH_DCP/torch_dcp/async",
)


def is_local(combo: str) -> bool:
    return combo.startswith("LOCAL/")


def shard_glob(combo: str, rank: int) -> str:
    """A glob for the data file rank `rank` writes (TP=2, DP=1)."""
    if combo.startswith("LEGACY/"):
        return f"*/mp_rank_{rank:02d}/model_optim_rng.pt"
    if is_local(combo):
        return f"*/rank_{rank:05d}/*/model_optim_rng.pt"
    return f"*/__{rank}_*.distcp"


def staging_glob(combo: str, rank: int, iteration: int) -> str:
    """A glob for the file rank `rank` writes while iteration `iteration` is still being staged."""
    staging = f".staging-iter_{iteration:07d}-*"
    if combo.startswith("LEGACY/"):
        return f"*/{staging}/mp_rank_{rank:02d}/model_optim_rng.pt"
    if is_local(combo):
        return f"*/rank_{rank:05d}/{staging}/model_optim_rng.pt"
    return f"*/{staging}/__{rank}_*.distcp"


def _fp(state: TrainingState) -> str:
    return combine(fingerprint(state.sharded_state_dict()), TOPOLOGY_BOUND_KEYS)


# ---- rank functions ----------------------------------------------------------------------------------
def save_under_faults(
    ctx,
    combo: str,
    root: str,
    faults,
    report=None,
    oplog=None,
    snapshot=None,
    clean: int = 1,
    keep_last=None,
    train_between: int = 1,
    then_load: bool = False,
):
    """Save `clean` checkpoints (iterations 1..clean), then one more under `faults`. Returns how the
    faulty save ended on this rank (and, with then_load, what load_each says about `root` afterwards:
    saves a second job when every rank survives)."""
    state = TrainingState(SPEC, TOPO, ctx.rank)
    backend = ReferenceBackend(Combination.parse(combo), keep_last=keep_last)
    for _ in range(clean):
        state.train(1)
        backend.save(state, root)
    backend.finalize()
    state.train(train_between)
    dist.barrier()  # a local save has no collective: every rank's checkpoint must be on disk first
    if snapshot is not None and ctx.rank == 0:
        Snapshot.take(root, snapshot)
    dist.barrier()
    start = time.monotonic()
    with inject(faults_from(faults), rank=ctx.rank, world=ctx.world, report=report, oplog_dir=oplog):
        try:
            backend.save(state, root)
            backend.finalize()
            outcome = "ok"
        except Exception as e:
            outcome = f"{type(e).__name__}: {e}"
    out = {"outcome": outcome, "seconds": time.monotonic() - start, "iteration": state.iteration}
    if then_load:
        out["loaded"] = load_each(ctx, combo, [root])[0]
    return out


def save_cases(ctx, combo: str, cases):
    """save_under_faults(..., then_load=True) for each (root, faults, report) in turn: faults every rank
    survives, many per job."""
    return [save_under_faults(ctx, combo, root, faults, report, then_load=True) for root, faults, report in cases]


def save_forever(ctx, combo: str, root: str, faults=(), until: int = 1000):
    """Save every iteration until killed (a nemesis target), under `faults` all along."""
    state = TrainingState(SPEC, TOPO, ctx.rank)
    backend = ReferenceBackend(Combination.parse(combo))
    with inject(faults_from(faults), rank=ctx.rank, world=ctx.world):
        for _ in range(until):
            state.train(1)
            backend.save(state, root)
        backend.finalize()
    return state.iteration


def load_each(ctx, combo: str, roots: list[str]):
    """Load the newest valid checkpoint of each root; compare its fingerprint with a fresh run trained to
    the loaded iteration. One entry per root: {"iteration", "fingerprint_ok", "warnings"} or {"refused"}."""
    groups = ParallelGroups(TOPO, ctx.rank)
    backend = ReferenceBackend(Combination.parse(combo))
    expected: dict[int, str] = {}
    out = []
    for root in roots:
        state = TrainingState(SPEC, TOPO, ctx.rank, groups)
        try:
            result = backend.load(state, root)
        except (CheckpointNotFound, IntegrityError, TopologyChangeRefused) as e:
            out.append({"refused": f"{type(e).__name__}: {e}"})
            continue
        got = _fp(state)
        if result.iteration not in expected:
            fresh = TrainingState(SPEC, TOPO, ctx.rank, groups)
            fresh.train(result.iteration)
            expected[result.iteration] = _fp(fresh)
        out.append(
            {
                "iteration": result.iteration,
                "fingerprint_ok": got == expected[result.iteration],
                "state_iteration": state.iteration,
                "warnings": result.warnings,
            }
        )
    return out


# ---- parent-side helpers -------------------------------------------------------------------------------
def run_job(fn, *args, timeout: float = 60.0, **kwargs):
    """Start and wait for a Job; the outcome (ranks may have died)."""
    return Job(fn, WORLD, args=args, kwargs=kwargs, timeout=timeout).start().wait()


def start_job(fn, *args, timeout: float = 60.0, **kwargs) -> Job:
    return Job(fn, WORLD, args=args, kwargs=kwargs, timeout=timeout).start()


def load_all(combo: str, roots) -> list[dict]:
    return run_ranks(load_each, WORLD, args=(combo, [str(r) for r in roots]), timeout=120)[0]


def newest_durable(combo: str, root) -> int | None:
    """The newest iteration whose checkpoint is complete and verified on disk (on every rank, for LOCAL)."""
    infos = [i for i in list_checkpoints(str(root)) if i.complete]
    if is_local(combo):
        per_rank: dict[str, set[int]] = {}
        for i in infos:
            per_rank.setdefault(os.path.dirname(i.path), set()).add(i.iteration)
        if len(per_rank) < WORLD:
            return None
        common = set.intersection(*per_rank.values())
        return max(common) if common else None
    its = [i.iteration for i in infos if os.path.dirname(i.path) == os.path.abspath(str(root))]
    return max(its) if its else None


def died_by_sigkill(outcome, rank: int) -> bool:
    o = outcome.outcomes[rank]
    return o.status == "signal" and o.signal == signal.SIGKILL
