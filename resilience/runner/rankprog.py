"""What every rank runs for one job of a scenario: build the state, then train / save / finalize /
load as the plan says, writing each operation to its own history file as it goes."""

from __future__ import annotations

import contextlib
import errno
import logging
import os
import re
import time
import warnings
from dataclasses import dataclass, field

from ..errors import CheckpointNotFound, IntegrityError, ResilienceError, TopologyChangeRefused
from ..history import EventLog
from ..launch.local import BLOCKED_AFTER
from ..state import GENERATION_PREFIX, RUN_BOUND_KEYS, ModelSpec, Topology, TrainingState, combine
from ..state.fingerprints import assemble, gather_pieces, generations
from ..vocab.combos import Combination
from .adapters import resolve_backend
from .arming import arm, log_for_power_loss, record_file_ops, use_store


@dataclass
class RankJob:
    """One job: the same plan on every rank."""

    spec: ModelSpec
    topo: Topology
    combo: Combination
    root: str  # checkpoint folder
    history_dir: str  # rank{r}.jsonl go here
    ops: list[dict]  # {"op": "load"|"train"|"save"|"finalize", ...}
    job: int = 0
    backend: str = "reference"  # the spec (runner.adapters): each rank process resolves it once
    faults: list[dict] = field(default_factory=list)  # in-process faults as JSON (plan.ArmedFault.to_dict)
    fault_log: str = ""  # where fired faults are reported
    oplog_dir: str = ""  # where each rank logs its file operations (power-loss states)
    snapshot_dir: str = ""  # where rank 0 copies the folder as it was before those operations
    control: str = ""  # the mount point of the fault-injecting file system, when the job runs under it
    fs_arms: list[int] = field(default_factory=list)  # ops at which its records arm (each rank tells it)
    file_ops_dir: str = ""  # where each rank logs its creates, renames and deletions (runner/file_ops.py)
    stagger: float = 0.0  # seconds every rank but rank 0 waits before it builds its state and backend
    store: dict | None = None  # the case's place on an object store (objectstore.store.CaseStore), or local files
    proxy: str = ""  # the fault proxy the ranks reach that store through (its records arm at fs_arms too)


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
    Exception escapes `except Exception` in a training loop), its errno by name (ENOSPC, EROFS, ...), and,
    when an adapter translated the library's error into the protocol's, what the library raised (`raw`)."""
    out: dict = {"error": f"{type(e).__name__}: {e}", **_class_of(e)}
    code = errno_of(e)
    if isinstance(code, int) and code in errno.errorcode:
        out["errno"] = errno.errorcode[code]
    raw = library_error(e)
    if raw is not None:
        out["raw"] = {"error": f"{type(raw).__name__}: {raw}"[:MAX_RAW_CHARS], **_class_of(raw)}
    return out


MAX_RAW_CHARS = 4000


def _class_of(e: BaseException) -> dict:
    """The class by its full name, and its bases when it is not an Exception."""
    cls = type(e)
    out: dict = {"class": f"{cls.__module__}.{cls.__qualname__}"}
    if not isinstance(e, Exception):
        out["not_exception"] = [f"{c.__module__}.{c.__qualname__}" for c in cls.__mro__[:-1]]
    return out


def library_error(e: BaseException) -> BaseException | None:
    """What the library raised under an error the adapter translated into the protocol's (a
    ResilienceError raised from it, or while handling it): the first exception down the chain that is
    not one of ours. None when `e` is the library's own or nothing lies under it."""
    seen: set[int] = set()
    cur: BaseException | None = e
    while isinstance(cur, ResilienceError) and id(cur) not in seen:
        seen.add(id(cur))
        cur = cur.__cause__ or cur.__context__
    return cur if cur is not None and cur is not e else None


def run_rank_job(ctx, plan: RankJob) -> dict:
    log = EventLog(os.path.join(plan.history_dir, f"rank{ctx.rank}.jsonl"), plan.job, ctx.rank)
    if plan.control:  # before any I/O: the file system attributes this process and its children to this rank
        from ..fusefs import tell

        tell(plan.control, "rank", ctx.rank)
    if plan.stagger and ctx.rank:
        time.sleep(plan.stagger)  # a start-up that crosses a wall-clock second: ranks read different clocks
    ops = _Ops(log, plan, ctx.rank)
    survived: BaseException | None = None  # the error a rank went on after, into the job's recovery
    skip_to: int | None = None  # the recover op a rank jumps to once a save or finalize raised
    with contextlib.ExitStack() as armed:
        use_store(armed, plan, ctx.rank)
        record_file_ops(armed, plan, ctx.rank)
        power = log_for_power_loss(armed, plan, ctx.rank)
        for index, op in enumerate(plan.ops + [{"op": "end"}]):
            if power is not None:
                power.matcher.reached(ctx.rank, index)
            arm(armed, plan, ctx.rank, index)
            if skip_to is not None and index < skip_to:
                continue
            kind = op["op"]
            if kind == "train":
                ops.state.train(int(op.get("steps", 1)))
                if ops.lead:
                    log.ok("train", steps=op.get("steps", 1), iteration=ops.state.iteration)
            elif kind in ("save", "finalize"):
                try:
                    if kind == "save":
                        ops.save()
                    else:
                        ops.finalize()
                except _RAISED as e:
                    _not_ours(e)
                    skip_to = next((i for i, o in enumerate(plan.ops) if i > index and o["op"] == "recover"), None)
                    if skip_to is None:
                        raise
                    survived = e  # the same processes go on: the job's recovery op judges what the fault left
            elif kind == "recover":
                Recovery(ops, f"{index}").run(survived)
                survived = None
            elif kind == "load" and op.get("fresh"):  # one of several crash states: nothing carries over
                fresh = TrainingState(plan.spec, plan.topo, ctx.rank)
                _load(
                    log,
                    ops.lead,
                    fresh,
                    ops.ref.make(plan.combo),
                    plan,
                    op["root"],
                    {"crash_state": op["crash_state"]},
                )
            elif kind == "load":
                if not _load(log, ops.lead, ops.state, ops.backend, plan):
                    break
            elif kind == "continue":  # train after a resume and fingerprint, for "never stopped" equality
                ops.state.train(int(op.get("steps", 1)))
                fp, _ = digests_of(ops.state)
                if ops.lead:
                    log.ok("continue", steps=op.get("steps", 1), iteration=ops.state.iteration, fingerprint=fp)
            elif kind != "end":
                raise ValueError(f"unknown rank op {kind!r}")
    log.close()
    return {"iteration": ops.state.iteration}


class _Ops:
    """One rank's training state and backend, and its saves and finalizes as the history records them."""

    def __init__(self, log: EventLog, plan: RankJob, rank: int):
        self.log, self.plan, self.rank = log, plan, rank
        self.lead = rank == 0
        self.state = TrainingState(plan.spec, plan.topo, rank)
        self.ref = resolve_backend(plan.backend)  # the plan's spec, resolved once in this rank process
        self.backend = self.ref.make(plan.combo)
        self.saves = 0
        self.in_flight: tuple[str, int] | None = None  # (save id, iteration) of the async save not yet finalized

    def save(self, **tags) -> None:
        """Save, logging invoke and ok or fail (then raising) with `tags` on each event."""
        plan, state, log = self.plan, self.state, self.log
        self.saves += 1
        save_id = f"{plan.job}.{self.saves}"  # the same on every rank: ranks save in the same order
        generation = plan.job * GENERATIONS_PER_JOB + self.saves
        state.stamp(generation)  # a re-save of an iteration differs from the earlier save of it
        fp, rng = digests_of(state)
        log.invoke(
            "save",
            save_id=save_id,
            iteration=state.iteration,
            generation=generation,
            dtype=str(plan.spec.precision),
            **tags,
            **({"fingerprint": fp, "rng": rng} if self.lead else {}),
        )
        # a save first finalizes the one still in flight
        previous = self.in_flight if self.backend.in_flight_iteration is not None else None
        try:
            self.backend.save(state, plan.root)
        except _RAISED as e:
            _not_ours(e)
            log.fail("save", save_id=save_id, iteration=state.iteration, **tags, **error_of(e))
            raise
        if previous is not None:
            log.ok("save", save_id=previous[0], iteration=previous[1], via="next save")
        if plan.combo.is_async:
            log.ok("stage", save_id=save_id, iteration=state.iteration, **tags)
            self.in_flight = (save_id, state.iteration)
        else:
            log.ok("save", save_id=save_id, iteration=state.iteration, **tags)

    def finalize(self, **tags) -> None:
        pending = self.in_flight if self.backend.in_flight_iteration is not None else None
        self.in_flight = None  # finalized, or failed: either way no longer in flight
        ids = {"save_id": pending[0], "iteration": pending[1]} if pending else {}
        log = self.log
        log.invoke("finalize", **ids, **tags)
        try:
            self.backend.finalize()
        except _RAISED as e:
            _not_ours(e)
            log.fail("finalize", **ids, **tags, **error_of(e))
            if pending is not None:
                log.fail("save", **ids, via="finalize", **tags, **error_of(e))
            raise
        log.ok("finalize", **ids, **tags)
        if pending is not None:
            log.ok("save", **ids, via="finalize", **tags)


# How long a rank whose operation raised waits for the others at a recovery's meeting point before it
# gives up and raises that error: as long as the launcher gives peers to end after a rank raised.
MEET_WAIT = BLOCKED_AFTER


class Recovery:
    """A `recover` op: after a fault the ranks survived in process (a save or finalize raised), the same
    processes, with the same backend object, load the newest checkpoint, train a step, save, finalize and
    load that save back into a fresh state. Every event carries `recovery`; an error in any of these is
    logged and the ranks go on together.

    Ranks must stay in step: a rank whose operation raised enters the next collective only once every rank
    reached the same point (a file per rank and point, beside the histories). If one does not come within
    MEET_WAIT (it is blocked in a collective the raising rank left), the raising rank raises its error and
    the launcher sees the blocked one, as when nothing recovers."""

    def __init__(self, ops: _Ops, name: str):
        self.ops, self.name = ops, name
        self.folder = os.path.join(ops.plan.history_dir, "meet")

    def run(self, survived: BaseException | None) -> None:
        ops, log = self.ops, self.ops.log
        if ops.in_flight is not None:  # an async save's failure surfaces as it is finalized
            survived = self._step("finalize", ops.finalize) or survived
        self._meet("start", survived)
        log.invoke("recover", survived=error_of(survived)["error"][:300] if survived is not None else None)
        self._meet("fault", self._load("fault"))
        ops.state.train(1)
        if ops.lead:
            log.ok("train", steps=1, iteration=ops.state.iteration, recovery=True)
        saved = self._step("save", lambda: ops.save(recovery=True))
        if saved is None and ops.in_flight is not None:
            self._step("finalize", lambda: ops.finalize(recovery=True))
        self._meet("save", self._load("save"))
        log.ok("recover")

    def _step(self, what: str, fn) -> BaseException | None:
        """Run a save or finalize (it logs itself); what it raised, once every rank is past it."""
        try:
            fn()
        except _RAISED as e:
            _not_ours(e)
            self._meet(what, e)
            return e
        self._meet(what, None)
        return None

    def _load(self, which: str) -> BaseException | None:
        """Load into a fresh state with the job's backend: `which` is "fault" (the newest checkpoint after
        the fault) or "save" (the recovery's own save). A load that raises anything is logged as failed."""
        ops = self.ops
        fresh = TrainingState(ops.plan.spec, ops.plan.topo, ops.rank)
        try:
            loaded = _load(ops.log, ops.lead, fresh, ops.backend, ops.plan, tags={"recovery": which}, catch_all=True)
        except _RAISED as e:  # raised past the load's own logging: the digests after it
            _not_ours(e)
            return e
        # failed on this rank or another (every rank learns which before the digests)
        return None if loaded else RuntimeError(f"the recovery's load ({which}) failed on rank {ops.rank}")

    def _meet(self, point: str, error: BaseException | None) -> None:
        """Say this rank reached `point`; a rank that raised waits there for every rank, or raises."""
        os.makedirs(self.folder, exist_ok=True)
        mine = os.path.join(self.folder, f"{self.name}.{point}.rank{self.ops.rank}")
        with open(mine, "w"):
            pass
        if error is None:
            return
        world = self.ops.plan.topo.world
        deadline = time.monotonic() + MEET_WAIT
        while time.monotonic() < deadline:
            if all(os.path.exists(os.path.join(self.folder, f"{self.name}.{point}.rank{r}")) for r in range(world)):
                return
            time.sleep(0.02)
        raise error


def _load(
    log: EventLog,
    lead: bool,
    state: TrainingState,
    backend,
    plan: RankJob,
    root: str | None = None,
    tags: dict | None = None,
    catch_all: bool = False,
) -> bool:
    """Load from `root` (the plan's by default); `tags` go into each of its events (a crash state's name).
    `catch_all`: any error the load raises is logged as its failure (a recovery's loads), not only a
    refusal or a missing or damaged checkpoint."""
    root = root or plan.root
    where = {"topology": str(plan.topo), "dtype": str(plan.spec.precision), **(tags or {})}
    log.invoke("load", **where)
    failed: dict | None = None
    with captured_warnings() as heard:
        try:
            result = backend.load(state, root)
        except TopologyChangeRefused as e:
            failed = {"refused": True, **error_of(e)}
        except (CheckpointNotFound, IntegrityError) as e:
            failed = {"refused": False, **error_of(e)}
        except _RAISED as e:
            _not_ours(e)
            if not catch_all:
                raise
            failed = {"refused": False, **error_of(e)}
    peers_failed = _failed_ranks(failed is None)  # every rank learns who failed: none waits on a rank that left
    if failed is not None:
        log.fail("load", **failed, **where, **({"captured": heard} if heard else {}))
        return False
    if peers_failed:  # this rank loaded, another raised: the job's load failed (evidence: a split load)
        log.ok("load", iteration=result.iteration, peers_failed=peers_failed, **where)
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


def _failed_ranks(ok: bool) -> list[int]:
    """The ranks whose load raised; collective (every rank calls it once per load, whatever its outcome)."""
    from .. import dist

    return sorted(dist.gather_failures(None if ok else "failed"))


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
