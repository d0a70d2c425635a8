"""What every rank runs in one torchrun attempt of a cluster validation.

An attempt first runs the save phase of every combination not yet saved (train, save, train, save, train,
save: the last save cut by a rank that SIGKILLs itself at the injection point, on the first attempt of that
combination only), then the resume phase of every combination saved before (load the newest valid
checkpoint, check it against what was saved and against training that never stopped, train on, save
again). A kill ends the attempt; torchrun restarts the group (--max-restarts) and the next attempt carries
on from what the shared folder records. No phase runs twice: one cut short by something other than the
planned kill is judged UNKNOWN."""

from __future__ import annotations

import contextlib
import os
import platform
import socket
import time

import torch
import torch.distributed as dist

from ..checkers import UNKNOWN, Verdict
from ..dist import all_agree, all_gather, broadcast
from ..errors import ConfigError, TopologyChangeRefused
from ..history import EventLog
from ..runner.adapters import BackendRef, resolve_backend
from ..runner.rankprog import digests_of
from ..state import ParallelGroups, Topology, TrainingState
from ..vocab.combos import Combination
from .spec import CONTINUE_STEPS, TRAIN_BEFORE, ClusterPlan, SharedFolder, TorchrunEnv, read_json, slug, write_json
from .verdicts import combination_row, finish, newest_valid, row_of


def group_attempt(env: TorchrunEnv) -> int:
    """The attempt of the whole group: the largest restart count of any node. A node whose agent restarted
    its workers only because another node rejoined keeps its old count (torch elastic counts failures per
    node), so one node's count alone can say 0 on the second attempt."""
    t = torch.tensor([env.restart_count], dtype=torch.int64)
    dist.all_reduce(t, op=dist.ReduceOp.MAX)
    return int(t.item())


def run_attempt(env: TorchrunEnv, plan: ClusterPlan, shared_folder: SharedFolder, *, command: str = "") -> int:
    """One attempt on this rank; returns the process exit status (the same on every rank)."""
    attempt = group_attempt(env)
    who = (env.rank, env.restart_count, env.group_rank, socket.gethostname(), os.getpid())
    everyone = all_gather(who)
    lead = env.rank == 0
    decision = None
    if lead:
        decision = _decide(env, plan, shared_folder, attempt, everyone, command)
    decision = broadcast(decision)
    if decision.get("error"):
        if lead:
            print(f"resilience validate: error: {decision['error']}", flush=True)
        return 2
    topo = Topology.from_dict(decision["topology"])
    shared_folder.create()  # rank 0 made the folders; on a network filesystem another node may not see them yet
    # every rank creates every group, once per attempt
    groups = ParallelGroups(topo, env.rank, experts=plan.spec.num_experts > 0)
    log = EventLog(shared_folder.history(env.rank), attempt, env.rank)
    if plan.io == "fuse":  # this process and its writers are this rank's, for the file system of this node
        from ..fusefs import tell

        tell(fuse_mount(), "rank", env.rank)
    try:
        with _on_store(plan, shared_folder):
            backend = resolve_backend(plan.backend)  # once in this rank process, for every phase of the attempt
            for combo in decision["save"]:
                kill = combo in decision["kill"]
                _save_phase(env, plan, shared_folder, topo, groups, log, attempt, backend, combo, kill)
            # every combination saved and not yet resumed: those of earlier attempts, and any whose kill never fired
            resume = broadcast(_resumable(plan, shared_folder) if lead else None)
            for combo in resume:
                _resume_phase(env, plan, shared_folder, topo, groups, log, attempt, backend, combo)
    finally:
        log.close()
    status = None
    if lead:
        status = finish(plan, shared_folder, attempt, command)
    return int(broadcast(status))


@contextlib.contextmanager
def _on_store(plan: ClusterPlan, shared_folder: SharedFolder):
    """On an object store, the checkpoints' folder of the shared folder is its prefix, through the seam, for
    the attempt (histories and verdicts stay in the shared folder)."""
    if plan.storage == "local":
        yield
        return
    from .. import storage
    from ..objectstore import S3Location
    from ..objectstore.store import CaseStore

    where = S3Location.parse(plan.storage)
    store = CaseStore(plan.endpoint_url or os.environ.get("AWS_ENDPOINT_URL", ""), where.bucket, where.prefix)
    with storage.use(store.filesystem(shared_folder.path("ckpt"))):
        yield


# ---- coordinator: what this attempt does --------------------------------------------------------------
def _decide(
    env: TorchrunEnv, plan: ClusterPlan, shared_folder: SharedFolder, attempt: int, everyone: list, command: str
) -> dict:
    try:
        topo = plan.topology(env.world)
        plan.kill_record(env.world)
    except Exception as e:
        return {"error": str(e)}
    shared_folder.create()
    recorded = read_json(shared_folder.plan)
    if recorded is None:
        write_json(
            shared_folder.plan,
            {
                "plan": plan.to_dict(),
                "run_id": env.run_id,
                "world": env.world,
                "topology": topo.to_dict(),
                "started": time.time(),
                "command": command,
            },
        )
    elif (
        recorded.get("plan") != plan.to_dict()
        or recorded.get("world") != env.world
        or recorded.get("run_id") != env.run_id
    ):
        return {
            "error": f"{shared_folder.root} holds another validation run (run id {recorded.get('run_id')!r}, "
            f"world {recorded.get('world')}); give each run an empty shared folder"
        }
    _append_attempt(shared_folder, attempt, everyone)
    save: list[Combination] = []
    for combo in plan.combinations:
        if os.path.exists(shared_folder.result(combo)):
            continue
        st = read_json(shared_folder.state(combo), {})
        if "resume_started" in st:
            _interrupted(plan, shared_folder, combo, st, attempt, command)
        elif "save_started" not in st:
            save.append(combo)
    kills = [c for c in save if c in plan.killed()]
    left = env.max_restarts - attempt
    if len(kills) > left:
        return {
            "error": f"{len(kills)} planned kills still to come but only {left} torchrun restarts left "
            f"(attempt {attempt}, --max-restarts {env.max_restarts}); run torchrun with "
            f"--max-restarts {attempt + len(kills)} or more"
        }
    print(
        f"[attempt {attempt}] world {env.world} as {topo}; to save: {', '.join(map(str, save)) or 'nothing'}; "
        f"kill armed in: {', '.join(map(str, kills)) or 'none'}",
        flush=True,
    )
    return {"topology": topo.to_dict(), "save": save, "kill": kills}


def _resumable(plan: ClusterPlan, shared_folder: SharedFolder) -> list[Combination]:
    out = []
    for combo in plan.combinations:
        st = read_json(shared_folder.state(combo), {})
        if "save_started" in st and "resume_started" not in st and not os.path.exists(shared_folder.result(combo)):
            out.append(combo)
    return out


def _append_attempt(shared_folder: SharedFolder, attempt: int, everyone: list) -> None:
    path = shared_folder.path("attempts.json")
    attempts = read_json(path, [])
    attempts.append(
        {
            "attempt": attempt,
            "time": time.time(),
            "ranks": [
                {"rank": r, "restart_count": c, "group_rank": g, "host": h, "pid": p} for r, c, g, h, p in everyone
            ],
        }
    )
    write_json(path, attempts)


def _interrupted(
    plan: ClusterPlan, shared_folder: SharedFolder, combo: Combination, st: dict, attempt: int, command: str
) -> None:
    why = (
        f"the resume phase started on attempt {st['resume_started']} was cut short by a failure other "
        f"than the planned kill (see the node logs); a phase never runs twice"
    )
    v = Verdict("run", UNKNOWN, why)
    write_json(
        shared_folder.result(combo), row_of(plan, shared_folder, combo, UNKNOWN, why, [v], 0.0, command).to_dict()
    )


def _mark(shared_folder: SharedFolder, combo: Combination, **fields) -> None:
    st = read_json(shared_folder.state(combo), {})
    st.update(fields)
    write_json(shared_folder.state(combo), st)


# ---- the phases (every rank) ---------------------------------------------------------------------------
def checkpoint_root(plan: ClusterPlan, shared_folder: SharedFolder, env: TorchrunEnv, combo: Combination) -> str:
    """Where this rank saves and loads `combo`: the shared folder, or under io fuse the same folder seen
    through the file system this node mounted over it."""
    if plan.io == "fuse":
        return os.path.join(fuse_mount(), slug(combo))
    return shared_folder.ckpt(combo)


def fuse_mount() -> str:
    """This node's mount point, from resilience.fusefs.node, which runs the node's torchrun."""
    from ..fusefs.node import MOUNT_ENV

    mount = os.environ.get(MOUNT_ENV)
    if not mount:
        raise ConfigError(
            "io",
            f"--io fuse, but {MOUNT_ENV} is not set",
            "run each node's torchrun under python -m resilience.fusefs.node, as `resilience validate` prints it",
        )
    return mount


def _save_phase(
    env: TorchrunEnv,
    plan: ClusterPlan,
    shared_folder: SharedFolder,
    topo: Topology,
    groups,
    log: EventLog,
    attempt: int,
    ref: BackendRef,
    combo: Combination,
    armed: bool,
) -> None:
    from ..faults import inject

    lead = env.rank == 0
    root = checkpoint_root(plan, shared_folder, env, combo)
    if lead:
        _mark(shared_folder, combo, save_started=attempt, kill_armed=armed, topology=str(topo), host=platform.node())
    dist.barrier()
    backend = ref.make(combo)
    state = TrainingState(plan.spec, topo, env.rank, groups)
    for i, steps in enumerate(TRAIN_BEFORE):
        state.train(steps)
        fp, rng = digests_of(state)
        log.invoke(
            "save", combo=str(combo), iteration=state.iteration, **({"fingerprint": fp, "rng": rng} if lead else {})
        )
        last = i == len(TRAIN_BEFORE) - 1
        if last and armed and plan.io == "fuse":  # the node's file system kills at a byte of this save
            from ..fusefs import tell

            tell(fuse_mount(), "arm", plan.fuse_arm(combo))
        faults = (
            inject(
                [plan.kill_record(env.world)],
                rank=env.rank,
                world=env.world,
                report=shared_folder.faults(combo, env.rank),
            )
            if last and armed and plan.io == "seam"
            else contextlib.nullcontext()
        )
        with faults:
            backend.save(state, root)
            if combo.is_async:
                log.ok("stage", combo=str(combo), iteration=state.iteration)
                backend.finalize()
        log.ok("save", combo=str(combo), iteration=state.iteration)
    if lead:
        _mark(shared_folder, combo, save_done=attempt)
        print(
            f"[attempt {attempt}] {combo}: saved iterations "
            f"{[sum(TRAIN_BEFORE[: k + 1]) for k in range(len(TRAIN_BEFORE))]}"
            + ("; the planned kill never fired" if armed else ""),
            flush=True,
        )
    dist.barrier()


def _resume_phase(
    env: TorchrunEnv,
    plan: ClusterPlan,
    shared_folder: SharedFolder,
    topo: Topology,
    groups,
    log: EventLog,
    attempt: int,
    ref: BackendRef,
    combo: Combination,
) -> None:
    lead = env.rank == 0
    root = checkpoint_root(plan, shared_folder, env, combo)
    started = time.monotonic()
    backend = ref.make(combo)
    newest = None
    if lead:
        _mark(shared_folder, combo, resume_started=attempt)
        newest = newest_valid(backend, root, combo)
    newest = broadcast(newest)
    state = TrainingState(plan.spec, topo, env.rank, groups)
    log.invoke("load", combo=str(combo), topology=str(topo), newest_valid=newest)
    try:
        result = backend.load(state, root)
    except Exception as e:  # any failure is a failed load to judge; the ranks agree below whether to go on
        log.fail(
            "load",
            combo=str(combo),
            topology=str(topo),
            refused=isinstance(e, TopologyChangeRefused),
            error=f"{type(e).__name__}: {e}",
        )
        result = None
    if not all_agree(result is not None):
        result = None
    after = None
    if result is not None:
        fp, rng = digests_of(state)
        log.ok(
            "load",
            combo=str(combo),
            topology=str(topo),
            iteration=result.iteration,
            path=os.path.relpath(result.path, root),
            rng_restored=result.rng_restored,
            warnings=result.warnings,
            **({"fingerprint": fp, "rng": rng} if lead else {}),
        )
        state.train(CONTINUE_STEPS)
        fp, rng = digests_of(state)
        log.ok(
            "continue",
            combo=str(combo),
            steps=CONTINUE_STEPS,
            iteration=state.iteration,
            **({"fingerprint": fp} if lead else {}),
        )
        log.invoke(
            "save", combo=str(combo), iteration=state.iteration, **({"fingerprint": fp, "rng": rng} if lead else {})
        )
        backend.save(state, root)
        backend.finalize()
        log.ok("save", combo=str(combo), iteration=state.iteration)
        dist.barrier()
        if lead:
            after = newest_valid(backend, root, combo)
    if lead:
        row = combination_row(plan, shared_folder, combo, topo, attempt, newest, after, time.monotonic() - started)
        write_json(shared_folder.result(combo), row.to_dict())
        print(f"[attempt {attempt}] {combo}: {row.verdict}: {row.detail[:300]}", flush=True)
    dist.barrier()
