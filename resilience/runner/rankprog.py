"""What every rank runs for one job of a scenario: build the state, then train / save / finalize /
load as the plan says, writing each operation to its own history file as it goes."""

from __future__ import annotations

import contextlib
import errno
import logging
import os
import re
import warnings
from dataclasses import dataclass, field

from ..errors import CheckpointNotFound, IntegrityError, TopologyChangeRefused
from ..state import GENERATION_PREFIX, RUN_BOUND_KEYS, ModelSpec, Topology, TrainingState, combine
from ..state.fingerprint import assemble, gather_pieces, generations
from ..vocab.combos import Combination
from .adapters import make_backend
from .history import EventLog


@dataclass
class RankPlan:
    """One job: the same plan on every rank."""

    spec: ModelSpec
    topo: Topology
    combo: Combination
    root: str  # checkpoint folder
    history_dir: str  # rank{r}.jsonl go here
    ops: list[dict]  # {"op": "load"|"train"|"save"|"finalize", ...}
    job: int = 0
    backend: str = "reference"
    faults: list[dict] = field(default_factory=list)  # in-process faults as JSON (plan.ArmedFault.to_dict)
    fault_log: str = ""  # where fired faults are reported
    oplog_dir: str = ""  # where each rank logs its file operations (power-loss states)
    snapshot_dir: str = ""  # where rank 0 copies the folder as it was before those operations
    control: str = ""  # the mount point of the fault-injecting file system, when the job runs under it
    fs_arms: list[int] = field(default_factory=list)  # ops at which its records arm (each rank tells it)


GENERATIONS_PER_JOB = 1000  # a save's generation: job * this + its number in the job, unique in a run


def digests_of(state: TrainingState) -> tuple[str | None, str | None]:
    """(fingerprint of the state training determines, digest of every rank's RNG); collective. Only
    rank 0 logs them, so only rank 0 computes them: the other ranks get (None, None)."""
    fp, rng, _ = _digests(state, False)
    return fp, rng


def _digests(state: TrainingState, with_generations: bool):
    pieces = gather_pieces(state.sharded_state_dict(), dst=0)
    if pieces is None:
        return None, None, None
    d = assemble(pieces)
    found = _generations(pieces) if with_generations else None
    return combine(d, RUN_BOUND_KEYS), d.get("rng"), found


def _generations(pieces) -> dict:
    """Which save's generation the loaded state carries: the numbers found, and where each sits when
    there is more than one (generation -> the parameters, or the boxes of them, holding it)."""
    per_key = generations(pieces, GENERATION_PREFIX)
    found = sorted({g for spans in per_key.values() for g in spans})
    out: dict = {"found": found}
    if len(found) > 1:
        out["pieces"] = {
            str(g): [
                key if len(at) == 1 else f"{key}[{','.join(f'{lo}:{hi}' for lo, hi in at[g]['box'])}]"
                for key, at in sorted(per_key.items())
                if g in at
            ]
            for g in found
        }
    return out


_ERRNO_TEXT = re.compile(r"\[Errno (\d+)\]")


def errno_of(e: BaseException, depth: int = 0) -> int | None:
    """The errno of an OSError, or of the first one under it: a real full disk reaches the rank program
    as a RankFailure gathering each rank's OSError (possibly only as text)."""
    code = getattr(e, "errno", None)
    if isinstance(code, int):
        return code
    if depth < 8:
        for inner in (e.__cause__, e.__context__, *getattr(e, "failures", {}).values()):
            if isinstance(inner, BaseException) and (code := errno_of(inner, depth + 1)) is not None:
                return code
    found = _ERRNO_TEXT.search(str(e))
    return int(found.group(1)) if found else None


# What a save or finalize may raise and still be recorded as the implementation's failure: anything but a
# stop of this process. torch DCP's CheckpointException, for one, derives from BaseException only.
_RAISED = BaseException
_STOPS = (KeyboardInterrupt, SystemExit, GeneratorExit)


def _not_ours(e: BaseException) -> None:
    if isinstance(e, _STOPS):
        raise e


def error_of(e: BaseException) -> dict:
    """What a failed operation records: the exception, its class's bases (an exception that is not an
    Exception escapes `except Exception` in a training loop), and its errno by name (ENOSPC, EROFS, ...)."""
    out: dict = {"error": f"{type(e).__name__}: {e}"}
    if not isinstance(e, Exception):
        out["not_exception"] = [f"{c.__module__}.{c.__qualname__}" for c in type(e).__mro__[:-1]]
    code = errno_of(e)
    if isinstance(code, int) and code in errno.errorcode:
        out["errno"] = errno.errorcode[code]
    return out


def run_plan(ctx, plan: RankPlan) -> dict:
    log = EventLog(os.path.join(plan.history_dir, f"rank{ctx.rank}.jsonl"), plan.job, ctx.rank)
    if plan.control:  # before any I/O: the file system attributes this process and its children to this rank
        from ..fusefs import tell

        tell(plan.control, "rank", ctx.rank)
    lead = ctx.rank == 0
    state = TrainingState(plan.spec, plan.topo, ctx.rank)
    backend = make_backend(plan.backend, plan.combo)
    saves = 0
    in_flight: tuple[str, int] | None = None  # (save id, iteration) of the async save not yet finalized
    with contextlib.ExitStack() as armed:
        for index, op in enumerate(plan.ops + [{"op": "end"}]):
            _arm(armed, plan, ctx.rank, index)
            kind = op["op"]
            if kind == "train":
                state.train(int(op.get("steps", 1)))
                if lead:
                    log.ok("train", steps=op.get("steps", 1), iteration=state.iteration)
            elif kind == "save":
                saves += 1
                save_id = f"{plan.job}.{saves}"  # the same on every rank: ranks save in the same order
                generation = plan.job * GENERATIONS_PER_JOB + saves
                state.stamp(generation)  # a re-save of an iteration differs from the earlier save of it
                fp, rng = digests_of(state)
                log.invoke(
                    "save",
                    save_id=save_id,
                    iteration=state.iteration,
                    generation=generation,
                    dtype=plan.spec.dtype,
                    **({"fingerprint": fp, "rng": rng} if lead else {}),
                )
                # a save first finalizes the one still in flight
                previous = in_flight if backend.in_flight_iteration is not None else None
                try:
                    backend.save(state, plan.root)
                except _RAISED as e:
                    _not_ours(e)
                    log.fail("save", save_id=save_id, iteration=state.iteration, **error_of(e))
                    raise
                if previous is not None:
                    log.ok("save", save_id=previous[0], iteration=previous[1], via="next save")
                if plan.combo.is_async:
                    log.ok("stage", save_id=save_id, iteration=state.iteration)
                    in_flight = (save_id, state.iteration)
                else:
                    log.ok("save", save_id=save_id, iteration=state.iteration)
            elif kind == "finalize":
                pending = in_flight if backend.in_flight_iteration is not None else None
                ids = {"save_id": pending[0], "iteration": pending[1]} if pending else {}
                log.invoke("finalize", **ids)
                try:
                    backend.finalize()
                except _RAISED as e:
                    _not_ours(e)
                    log.fail("finalize", **ids, **error_of(e))
                    if pending is not None:
                        log.fail("save", **ids, via="finalize", **error_of(e))
                    raise
                log.ok("finalize", **ids)
                if pending is not None:
                    log.ok("save", **ids, via="finalize")
                in_flight = None
            elif kind == "load" and op.get("fresh"):  # one of several crash states: nothing carries over
                fresh = TrainingState(plan.spec, plan.topo, ctx.rank)
                _load(
                    log,
                    lead,
                    fresh,
                    make_backend(plan.backend, plan.combo),
                    plan,
                    op["root"],
                    {"crash_state": op["crash_state"]},
                )
            elif kind == "load":
                if not _load(log, lead, state, backend, plan):
                    break
            elif kind == "continue":  # train after a resume and fingerprint, for "never stopped" equality
                state.train(int(op.get("steps", 1)))
                fp, _ = digests_of(state)
                if lead:
                    log.ok("continue", steps=op.get("steps", 1), iteration=state.iteration, fingerprint=fp)
            elif kind != "end":
                raise ValueError(f"unknown rank op {kind!r}")
    log.close()
    return {"iteration": state.iteration}


def _load(
    log: EventLog,
    lead: bool,
    state: TrainingState,
    backend,
    plan: RankPlan,
    root: str | None = None,
    tags: dict | None = None,
) -> bool:
    """Load from `root` (the plan's by default); `tags` go into each of its events (a crash state's name)."""
    root = root or plan.root
    where = {"topology": str(plan.topo), "dtype": plan.spec.dtype, **(tags or {})}
    log.invoke("load", **where)
    failed: dict | None = None
    with captured_warnings() as heard:
        try:
            result = backend.load(state, root)
        except TopologyChangeRefused as e:
            failed = {"refused": True, "error": f"{type(e).__name__}: {e}"}
        except (CheckpointNotFound, IntegrityError) as e:
            failed = {"refused": False, "error": f"{type(e).__name__}: {e}"}
    if failed is not None:
        log.fail("load", **failed, **where, **({"captured": heard} if heard else {}))
        return False
    fp, rng, found = _digests(state, True)
    value = {
        "iteration": result.iteration,
        "path": os.path.relpath(result.path, root),
        "rng_restored": result.rng_restored,
        "warnings": result.warnings,
        **where,
        **({"captured": heard} if heard else {}),
    }
    if lead:
        value.update(fingerprint=fp, rng=rng, generations=found)
    log.ok("load", **value)
    return True


MAX_CAPTURED, MAX_CAPTURED_CHARS = 20, 500


class _Heard(logging.Handler):
    def __init__(self, into: list[str]):
        super().__init__(logging.WARNING)
        self.into = into

    def emit(self, record: logging.LogRecord) -> None:
        if len(self.into) < MAX_CAPTURED:
            with contextlib.suppress(Exception):  # a record that cannot format is not worth a failed load
                self.into.append(f"log {record.levelname} {record.name}: {record.getMessage()}"[:MAX_CAPTURED_CHARS])


@contextlib.contextmanager
def captured_warnings():
    """What an implementation told its user during a load, besides LoadResult.warnings: every Python
    warning and every log record at WARNING or above (how a library says it cast a tensor)."""
    heard: list[str] = []
    handler = _Heard(heard)
    root = logging.getLogger()
    root.addHandler(handler)
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            yield heard
    finally:
        root.removeHandler(handler)
        for w in caught[: max(0, MAX_CAPTURED - len(heard))]:
            heard.append(f"warning {w.category.__name__}: {w.message}"[:MAX_CAPTURED_CHARS])


def _arm(stack: contextlib.ExitStack, plan: RankPlan, rank: int, index: int) -> None:
    """Install the in-process faults armed at this op: from here on they watch this rank's I/O. The file
    system's records armed here are told so."""
    if plan.control and index in plan.fs_arms:
        from ..fusefs import tell

        tell(plan.control, "arm", index)
    records = [f["fault"] for f in plan.faults if f["arm_at"] == index]
    if not records:
        return
    from ..faults import LostUnsyncedWrites, faults_from, inject

    faults = faults_from(records, world=plan.topo.world, where="fault")  # read once, as they cross to the rank
    oplog = None
    if any(isinstance(f, LostUnsyncedWrites) for f in faults):
        import torch.distributed as dist

        from ..faults import Snapshot

        dist.barrier()  # the folder as it is now is what survives a power loss; snapshot it once
        if rank == 0:
            Snapshot.take(plan.root, plan.snapshot_dir)
        dist.barrier()
        oplog = plan.oplog_dir
    stack.enter_context(inject(faults, rank=rank, world=plan.topo.world, report=plan.fault_log, oplog_dir=oplog))
