"""The jobs of an adapter check (resilience.runner.adapter_check): the topologies and iterations it uses,
what each rank does, the facts file it writes step by step (so a rank that hangs or dies still leaves what
it did), and one job run on real ranks with its facts read back."""

from __future__ import annotations

import json
import os
from dataclasses import dataclass

from ..errors import CheckpointNotFound, IntegrityError, TopologyChangeRefused
from ..state import ModelSpec, Topology
from ..vocab import Combination
from .adapters import resolve_backend
from .listing import listing_problems

# saved on the first, loaded there and on the second (tp and dp change); the second's own save is loaded on
# the third: a change of dp alone
TOPOLOGIES = (Topology.parse("tp2pp1dp1"), Topology.parse("tp1pp1dp2"), Topology.parse("tp1pp1dp1"))
FIRST, SECOND = 2, 3  # the iterations saved on the first topology


@dataclass
class CheckJob:
    spec: ModelSpec
    topo: Topology
    combo: Combination
    backend: str  # the spec (runner.adapters): each rank process resolves it once
    root: str  # the checkpoints of the first topology
    empty: str  # an empty folder
    own_root: str  # the second topology's own save
    facts: str  # rank{r}.jsonl go here
    job: str  # "first", "second" or "dp" (the change of dp alone)


# ---- in each rank process -----------------------------------------------------------------------------
class _Facts:
    def __init__(self, plan: CheckJob, rank: int):
        self.path = os.path.join(plan.facts, f"{plan.job}.rank{rank}.jsonl")

    def put(self, step: str, **facts) -> None:
        with open(self.path, "a", encoding="utf-8") as f:
            f.write(json.dumps(dict(facts, step=step), default=str) + "\n")


def _error(e: BaseException) -> dict:
    kind = (
        "refused"
        if isinstance(e, TopologyChangeRefused)
        else "not_found"
        if isinstance(e, CheckpointNotFound)
        else "integrity"
        if isinstance(e, IntegrityError)
        else "other"
    )
    return {"raised": type(e).__name__, "error": str(e)[:400], "kind": kind}


def _result(value) -> dict:
    """What a load returned, field by field (LoadResult: iteration, path, rng_restored, warnings)."""
    fields = {name: getattr(value, name, None) for name in ("iteration", "path", "rng_restored", "warnings")}
    return {
        "returned": type(value).__name__,
        **{k: v for k, v in fields.items()},
        "has": [k for k in fields if hasattr(value, k)],
    }


def _load(facts: _Facts, step: str, backend, plan: CheckJob, rank: int, root: str, *, fingerprint: bool):
    from ..state import TrainingState
    from .rankprog import digests_of

    state = TrainingState(plan.spec, plan.topo, rank)
    try:
        value = backend.load(state, root)
    except Exception as e:
        facts.put(step, **_error(e))
        return
    out = _result(value)
    if fingerprint:
        fp, rng = digests_of(state)  # collective; rank 0 gets the digests
        out.update(fingerprint=fp, rng=rng)
    facts.put(step, **out)


def _save(facts: _Facts, step: str, backend, state, root: str) -> None:
    try:
        backend.save(state, root)
        in_flight = backend.in_flight_iteration
        done = backend.finalize()
    except Exception as e:
        facts.put(step, iteration=state.iteration, **_error(e))
        raise  # a save that failed leaves nothing to check on: the job ends here
    facts.put(step, iteration=state.iteration, in_flight=in_flight, finalized=done)


def _check_rank(ctx, plan: CheckJob) -> dict:
    import torch.distributed as dist

    from ..state import TrainingState
    from .rankprog import digests_of

    facts = _Facts(plan, ctx.rank)
    backend = resolve_backend(plan.backend).make(plan.combo)  # the spec, resolved once in this rank process
    if plan.job == "first":
        _load(facts, "empty_load", backend, plan, ctx.rank, plan.empty, fingerprint=False)
        state = TrainingState(plan.spec, plan.topo, ctx.rank)
        for iteration in (FIRST, SECOND):
            state.train(iteration - state.iteration)
            _save(facts, "save", backend, state, plan.root)
        fp, rng = digests_of(state)
        facts.put("saved", fingerprint=fp, rng=rng)
        dist.barrier()
        if ctx.rank == 0:
            try:
                listed = backend.list_checkpoints(plan.root)
                facts.put(
                    "listing",
                    problems=listing_problems(listed),
                    items=[
                        {k: getattr(c, k, None) for k in ("iteration", "path", "complete", "problem")}
                        for c in (listed if isinstance(listed, (list, tuple)) else [])
                    ],
                )
            except Exception as e:
                facts.put("listing", **_error(e))
        dist.barrier()
        _load(facts, "load_same", backend, plan, ctx.rank, plan.root, fingerprint=True)
    elif plan.job == "dp":
        _load(facts, "load_dp", backend, plan, ctx.rank, plan.own_root, fingerprint=True)
    else:
        _load(facts, "load_other", backend, plan, ctx.rank, plan.root, fingerprint=True)
        state = TrainingState(plan.spec, plan.topo, ctx.rank)
        state.train(SECOND)
        _save(facts, "own_save", backend, state, plan.own_root)
        fp, rng = digests_of(state)
        facts.put("own_saved", fingerprint=fp, rng=rng)
        _load(facts, "own_load", backend, plan, ctx.rank, plan.own_root, fingerprint=True)
    return {}


def _read(plan: CheckJob, world: int) -> list[dict[str, list[dict]]]:
    """Per rank: step -> the facts it wrote for that step, in order."""
    out = []
    for r in range(world):
        steps: dict[str, list[dict]] = {}
        path = os.path.join(plan.facts, f"{plan.job}.rank{r}.jsonl")
        if os.path.exists(path):
            with open(path, encoding="utf-8") as f:
                for line in f:
                    fact = json.loads(line)
                    steps.setdefault(fact["step"], []).append(fact)
        out.append(steps)
    return out


def run_job(plan: CheckJob, timeout: float, log_dir: str) -> tuple[list[dict[str, list[dict]]], str]:
    """One job of the check on real ranks: per rank, the facts it wrote (step -> facts); and how the job
    failed, "" when it did not."""
    from ..launch import Job

    outcome = (
        Job(_check_rank, plan.topo.world, args=(plan,), timeout=timeout, log_dir=log_dir, pin_cpus=True).start().wait()
    )
    failed = ""
    if not outcome.ok:
        first = outcome.first_failure()
        if first is not None:
            text = first.describe().strip().splitlines()
            failed = f"rank {first.rank} {text[0] if text else first.status}"
            if outcome.timed_out:
                failed += f" (the job did not finish in {timeout:g} s: a collective waited for a rank that had failed)"
    return _read(plan, plan.topo.world), failed
