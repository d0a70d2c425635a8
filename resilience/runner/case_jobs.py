"""The jobs of one case: a job's rank processes under its faults, bounded in time, their histories merged
into the case's; and the crash states a power loss left, each loaded on the ranks. What went wrong
unexpectedly (a rank that raised outside its history, hung, stopped or died unplanned) comes back."""

from __future__ import annotations

import os
import time
from dataclasses import dataclass

from ..checkers.case import NOT_IN_BACKEND
from ..faults import LostUnsyncedWrites, Nemesis, RankCrash, SlowWrite, read_firings
from ..fusefs.injector import carries_out
from ..history import FAILED, INFO, INVOKE, OK, Event, EventLog, merge_job, rank_events, read_events
from ..launch import Job
from ..launch.outcomes import MAX_JOB_TIMEOUT
from ..objectstore.store import CaseStore
from ..vocab.combos import Combination
from . import io_route
from .adapters import BackendRef
from .fault_outcomes import FaultOutcome
from .file_ops import FILE_OPS
from .plan import JobSpec
from .rankprog import RankJob, run_rank_job
from .scenario import Scenario


@dataclass(frozen=True)
class CaseJobs:
    """What every job of one case shares: the case, its folder and history, the backend, how ranks start."""

    scenario: Scenario
    combo: Combination
    case_dir: str
    history: EventLog
    backend: BackendRef  # resolved once for the run (runner.adapters); its ranks get its spec
    start_method: str = "fork"
    store: CaseStore | None = None  # the case's place on an object store; None: files under its folder

    @property
    def fault_log(self) -> str:
        return os.path.join(self.case_dir, "faults.jsonl")

    def job_dir(self, kind: str, job_no: int) -> str:
        """The folder of one job's `kind` of evidence (ranks, logs, oplog, snapshots, states)."""
        return os.path.join(self.case_dir, kind, f"job{job_no}")


def run_job(
    case: CaseJobs,
    planned: JobSpec,
    job_no: int,
    root: str,
    *,
    crash_state: str | None = None,
    way: str = io_route.SEAM,
    per_event_state: bool = False,
    timeout: float | None = None,
    outcomes: list[FaultOutcome] | None = None,
) -> list[dict]:
    """Run one job; what went wrong unexpectedly. The nemesis's faults that found nothing to act on in
    this backend (a writer that is a thread of the rank) go to `outcomes`."""
    rank_dir = case.job_dir("ranks", job_no)
    os.makedirs(rank_dir, exist_ok=True)
    fired_before = len(read_firings(case.fault_log))
    spec = case.scenario.model.in_precision(planned.precision) if planned.precision else case.scenario.model
    case.history.append(
        INVOKE,
        "job",
        job=job_no,
        kind=planned.kind,
        topology=str(planned.topo),
        ops=planned.ops,
        crash_state=crash_state,
        dtype=str(spec.precision),
    )
    if crash_state and way != io_route.OBJECT:
        way = io_route.SEAM  # a crash state is only loaded, with no fault: nothing to mount
    if way == io_route.FUSE and any(
        carries_out(f.fault) and isinstance(f.fault, LostUnsyncedWrites) for f in planned.faults
    ):
        from ..faults import Snapshot

        Snapshot.take(root, case.job_dir("snapshots", job_no))  # the file system logs every operation from here
    outcome = _launch(case, planned, job_no, root, spec, way, timeout, outcomes)
    if way == io_route.OBJECT and any(o.signal for o in outcome.outcomes):
        _store_as_left(case, job_no)
    events = _merge_histories(case, planned, job_no, fired_before, crash_state, per_event_state, outcome)
    _record_end(case.history, job_no, outcome)
    return _unexpected(planned, job_no, outcome, events)


def _launch(case: CaseJobs, planned: JobSpec, job_no: int, root: str, spec, way: str, timeout, outcomes):
    """The job's ranks, run to their end under its faults (the nemesis's beside them); the job's outcome."""
    with io_route.job_way(way, root, case.case_dir, job_no, planned.faults, case.fault_log, case.store) as w:
        plan = RankJob(
            spec,
            planned.topo,
            case.combo,
            w.root,
            case.job_dir("ranks", job_no),
            planned.ops,
            job_no,
            case.backend.spec,
            [f.to_dict() for f in w.in_process],
            case.fault_log,
            case.job_dir("oplog", job_no),
            case.job_dir("snapshots", job_no),
            control=w.control,
            fs_arms=w.arms,
            file_ops_dir=case.job_dir(FILE_OPS, job_no),
            stagger=planned.stagger,
            store=None if case.store is None else case.store.to_dict(),
            proxy=w.proxy,
        )
        job = Job(
            run_rank_job,
            planned.topo.world,
            args=(plan,),
            timeout=timeout or _grown_to_fit(case.scenario.timeout, planned.faults) + planned.stagger,
            log_dir=case.job_dir("logs", job_no),
            start_method=case.start_method,
            pin_cpus=True,
        )  # ranks mostly wait on each other: fewer CPUs than ranks, pin them
        with job:  # torn down however this ends (Ctrl-C, SIGTERM as resilience.errors.Interrupted)
            nemesis = None
            if planned.kills:
                os.makedirs(root, exist_ok=True)
                nemesis = Nemesis(
                    job,
                    [k.fault for k in planned.kills],
                    folder=root,
                    mount=w.root if os.path.abspath(w.root) != os.path.abspath(root) else None,
                    report=case.fault_log,
                    listing=_store_listing(case.store, root),
                    staged=_staged_as(case.store, root),
                ).start()
            try:
                return job.wait()
            finally:
                if nemesis is not None:
                    nemesis.stop()
                    if outcomes is not None:
                        outcomes += [FaultOutcome(f, NOT_IN_BACKEND, why) for f, why in nemesis.not_applicable()]


STORE_POLL = 0.02  # seconds between listings of an object store by the nemesis: a request each, not a stat


def _store_listing(store: CaseStore | None, root: str):
    """What the nemesis watches on an object store: its listing, as paths under the checkpoint folder, listed
    again at most every STORE_POLL seconds (in between, the nemesis watches the ranks' open files)."""
    if store is None:
        return None
    from ..objectstore.mirror import sizes

    client = store.client()
    seen: dict[str, int] = {}
    when = [0.0]

    def listing() -> dict[str, int]:
        if time.monotonic() - when[0] >= STORE_POLL:
            when[0] = time.monotonic()
            seen.clear()
            seen.update(sizes(store, os.path.abspath(root), client))
        return dict(seen)

    return listing


def _store_as_left(case: CaseJobs, job_no: int) -> None:
    """What a loader can see on the store after a job a rank of was killed, from the proxy's log of it
    (objectstore.journal.crash_view): the objects the server wrote, whether their client heard so, and the
    multipart uploads left open; into the case's history."""
    from ..objectstore.journal import crash_view, read_requests

    view = crash_view(read_requests(os.path.join(case.case_dir, io_route.PROXY_LOGS, f"job{job_no}.jsonl")))
    unheard = [o["key"] for o in view["objects"] if not o["acknowledged"]]
    case.history.info(
        "store_after_kill",
        job=job_no,
        objects=len(view["objects"]),
        unacknowledged=unheard[:20],
        orphaned_uploads=[{"key": u["key"], "parts": u["parts"]} for u in view["orphans"]][:20],
    )


def _staged_as(store: CaseStore | None, root: str):
    """What the nemesis maps a rank's open file by: an object it stages before upload, as its path under root."""
    if store is None:
        return None
    return lambda path: store.staged_as(path, os.path.abspath(root))


def _merge_histories(
    case: CaseJobs,
    planned: JobSpec,
    job_no: int,
    fired_before: int,
    crash_state: str | None,
    per_event_state: bool,
    outcome,
) -> list[Event]:
    """The ranks' events of the job, in time order, written into the case's history with the job's
    firings and a close for every invoke left open; the ranks' events."""
    rank_dir = case.job_dir("ranks", job_no)
    rank_logs = [os.path.join(rank_dir, f"rank{r}.jsonl") for r in range(planned.topo.world)]
    # a batch's ranks name the state of each load themselves
    events = rank_events(rank_logs, job_no, crash_state=None if per_event_state else crash_state)
    first = outcome.first_failure()
    why = f"rank {first.rank}: {first.describe().splitlines()[0]}" if first else ""
    merge_job(case.history, events, job_no, firings=read_firings(case.fault_log)[fired_before:], why=why or "job ended")
    return events


def _grown_to_fit(timeout: float, faults) -> float:
    """The job's timeout with the time its slow operations are told to wait added (a straggler's delay times
    the operations it strikes, one when it strikes every one): a delay of seconds is not taken for a hang."""
    stalls = [f.fault for f in faults if isinstance(f.fault, SlowWrite)]
    return min(MAX_JOB_TIMEOUT, timeout + sum(f.delay * (f.times or 1) for f in stalls))


def _record_end(history: EventLog, job_no: int, outcome) -> None:
    """The job's end in the case's history: each rank's status and signal, the blocked and hung ranks'
    stacks."""
    statuses = {o.rank: o.status for o in outcome.outcomes}
    signals = {o.rank: o.signal for o in outcome.outcomes if o.signal}
    raised = next((o for o in outcome.outcomes if o.status == "error"), None)  # the rank the blocked waited on
    after = {"after": {"rank": raised.rank, "error": raised.error.splitlines()[0][:200]}} if raised else {}
    blocked = {
        o.rank: {"error": o.error, "stacks": o.stacks, **after} for o in outcome.outcomes if o.status == "blocked"
    }
    hung = {o.rank: {"stacks": o.stacks} for o in outcome.outcomes if o.status == "timeout" and o.stacks}
    history.append(
        OK if outcome.ok else INFO,
        "job",
        job=job_no,
        statuses=statuses,
        signals=signals,
        timed_out=outcome.timed_out,
        seconds=round(outcome.seconds, 3),
        **({"blocked": blocked} if blocked else {}),
        **({"hung": hung} if hung else {}),
    )


def _unexpected(planned: JobSpec, job_no: int, outcome, events: list[Event]) -> list[dict]:
    """What went wrong in the job that no fault of it planned."""
    planned_kill = bool(planned.kills) or any(
        isinstance(f.fault, (RankCrash, LostUnsyncedWrites)) for f in planned.faults
    )
    # a rank killed as planned: the others' collectives with it raise (gloo's "connection closed by peer") in
    # whatever they were doing, before the launcher stops them
    killed = {o.rank for o in outcome.outcomes if o.status == "signal"} if planned_kill else set()
    unexpected = []
    for o in sorted(outcome.outcomes, key=lambda o: o.status != "stopped"):  # a stopped rank explains the rest
        if o.status == "error" and not _is_logged_failure(events, o.rank) and not killed - {o.rank}:
            unexpected.append({"job": job_no, "rank": o.rank, "error": o.describe()})
        if o.status in ("timeout", "stopped") or (o.status == "signal" and not planned_kill):
            unexpected.append({"job": job_no, "rank": o.rank, "error": o.describe()})
    return unexpected


def _is_logged_failure(events, rank: int) -> bool:
    return any(e.type == FAILED and e.process == rank for e in events)


def load_crash_states(case: CaseJobs, state_roots: list[str], planned: JobSpec, job_no: int) -> tuple[int, list[dict]]:
    """Load every crash state, each into a fresh state and backend, on the ranks of one job: one fork
    and one process group for all of them (rankprog: a load op with its own root). When that job ends
    early (a rank died or hung on one state), the states after that one are loaded one job each, as
    before. The last job number used, and what went wrong unexpectedly."""
    unexpected: list[dict] = []
    if not state_roots:
        return job_no, unexpected
    job_no += 1
    names = [os.path.basename(r) for r in state_roots]
    ops = [{"op": "load", "root": r, "crash_state": n, "fresh": True} for r, n in zip(state_roots, names)]
    batch = JobSpec(planned.topo, "crash_state", ops)
    unexpected += run_job(
        case,
        batch,
        job_no,
        os.path.dirname(state_roots[0]),
        crash_state=f"{len(names)} states",
        per_event_state=True,
        timeout=case.scenario.timeout * len(names),
    )
    reached = _crash_states_loaded(os.path.join(case.job_dir("ranks", job_no), "rank0.jsonl"))
    last = max((names.index(n) for n in reached if n in names), default=-1)
    if unexpected or last < len(names) - 1:
        for state_root in state_roots[last + 2 if unexpected else last + 1 :]:  # past the one that ended the job
            job_no += 1
            probe = JobSpec(planned.topo, "crash_state", [{"op": "load"}])
            unexpected += run_job(case, probe, job_no, state_root, crash_state=os.path.basename(state_root))
    return job_no, unexpected


def _crash_states_loaded(rank0_history: str) -> list[str]:
    """The crash states whose load ended (ok or failed) on rank 0 of a batch job."""
    return [
        e.value["crash_state"]
        for e in read_events(rank0_history)
        if e.f == "load" and e.type in (OK, FAILED) and "crash_state" in e.value
    ]
