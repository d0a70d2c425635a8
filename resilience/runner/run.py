"""Run one scenario for one combination: jobs of real rank processes, faults, a merged history,
checkers, and a verdict with evidence. Every job is bounded in time; nothing is left running."""

from __future__ import annotations

import os
import shlex
import time
from dataclasses import dataclass, field, replace

from ..checkers import ALL, UNPROBED, Evidence, Status, Verdict, run_checker
from ..checkers.case import FIRED, NEVER_FIRED, NOT_APPLICABLE, NOT_IN_BACKEND, case_verdict, judge_expect
from ..errors import ResilienceError
from ..faults import Fault, LostUnsyncedWrites, Nemesis, NothingToDamage, RankCrash, read_firings
from ..faults.layout_damage import NotApplicable
from ..fusefs.injector import carries_out
from ..history import (
    FAIL as FAILED,
    HISTORY_FILE,
    INFO,
    INVOKE,
    OK,
    Event,
    EventLog,
    case_history,
    merge_job,
    rank_events,
    read_events,
)
from ..launch import Job
from ..vocab.combos import Combination
from ..vocab.contract import TopologyContract
from . import faultplan, ways
from .adapters import contract_of, make_backend
from .evidence import evidence_from
from .oracle import never_stopped, precision_change
from .plan import Corruption, JobSpec, plan_jobs
from .rankprog import RankPlan, run_plan
from .scenario import Scenario


@dataclass
class CaseResult:
    scenario: str
    combo: str
    verdict: Status
    verdicts: list[Verdict]
    seconds: float
    case_dir: str
    replay: str
    detail: str = ""
    fault: str | None = None
    transition: str | None = None
    tags: list[str] = field(default_factory=list)
    faults: list[dict] = field(default_factory=list)  # {"fault", "status": fired/never fired/not applicable, "detail"}
    # the case's history as run_case read it, once (None: none was written); not part of the row
    history: list[Event] | None = field(default=None, repr=False, compare=False)

    def to_row(self) -> dict:
        return {
            "scenario": self.scenario,
            "combo": self.combo,
            "fault": self.fault,
            "transition": self.transition,
            "verdict": Status(self.verdict).value,
            "detail": self.detail,
            "seconds": round(self.seconds, 3),
            "checkers": [v.to_dict() for v in self.verdicts],
            "faults": self.faults,
            "case_dir": self.case_dir,
            "replay": self.replay,
        }


def replay_command(scenario_file: str, combo: Combination, backend: str = "reference", io: str | None = None) -> str:
    cmd = ["resilience", "run", scenario_file, "--combos", str(combo)]
    if backend != "reference":
        cmd += ["--backend", backend]
    if io is not None and io != ways.AUTO:  # a file that does not say how its faults reached the backend
        cmd += ["--io", io]
    return " ".join(shlex.quote(c) for c in cmd)


def run_case(
    scenario: Scenario,
    combo: Combination,
    case_dir: str,
    *,
    backend: str | None = None,
    fault: str | None = None,
    transition: str | None = None,
    start_method: str = "fork",
    io: str | None = None,
) -> CaseResult:
    """Run `scenario` with `combo`, keeping every piece of evidence under `case_dir`; `io` is the way
    in-process faults reach the implementation (runner.ways: seam, fuse, auto)."""
    backend = backend or scenario.backend
    io = ways.check(io or scenario.io)
    start = time.monotonic()
    make_backend(backend, combo)  # imports the implementation here, once, not in every forked rank
    contract = contract_of(backend, combo)
    way = case_way(scenario, backend, io)
    os.makedirs(case_dir, exist_ok=True)
    scenario_file = os.path.join(case_dir, "scenario.yaml")
    with open(scenario_file, "w") as f:
        # the way it ran (its io, backend and one combination), so the file replays alone
        f.write(replace(scenario.as_run(combo, backend), io=io).to_yaml())
    replay = replay_command(scenario_file, combo, backend)
    if way == ways.FUSE and (why := ways.unavailable()) is not None:
        return _cannot_mount(scenario, combo, case_dir, replay, why, start, fault, transition)
    history = EventLog(os.path.join(case_dir, HISTORY_FILE), process="runner")
    history.info(
        "case",
        scenario=scenario.name,
        combo=str(combo),
        seed=scenario.seed,
        backend=backend,
        io=way,
        contract=str(contract),
    )
    root = os.path.join(case_dir, "ckpt")
    unexpected: list[dict] = []
    configured: list[Fault] = []
    lost: list[dict] = []
    outcomes: list[FaultOutcome] = []  # what became of the corruptions and power losses, beside the firings
    fault_log = os.path.join(case_dir, "faults.jsonl")
    try:
        layout = faultplan.layout_for(scenario, combo, backend, case_dir, start_method, io=way)
    except ResilienceError as e:  # the backend could not save once: the case's own jobs will show it
        layout = None
        history.info("layout", learned=False, why=str(e)[:500])
    if layout is not None:
        history.info("layout", learned=True, seam=layout.seam, layout=layout.describe())
    job_no = 0
    for planned in plan_jobs(scenario, combo, layout):
        configured += [f.fault for f in planned.faults + planned.kills]
        for u in planned.unreachable:  # aimed through the layout, nothing in this backend to aim at
            status = NEVER_FIRED if u.why == faultplan.OUTSIDE_SEAM else NOT_IN_BACKEND
            outcomes.append(FaultOutcome(u.fault, status, u.why))
        unexpected += _run_job(
            planned,
            job_no,
            combo,
            scenario,
            root,
            case_dir,
            history,
            backend,
            start_method=start_method,
            way=way,
            outcomes=outcomes,
        )
        this_job = job_no
        for action in planned.after:
            acted_on = action.fault  # (`fault` is the matrix column's name)
            if isinstance(action, Corruption):
                try:
                    done = faultplan.corrupt(root, acted_on, layout)
                    history.ok("corrupt", **done)
                    outcomes.append(FaultOutcome(acted_on, FIRED, f"damaged {done.get('rel') or 'the checkpoint'}"))
                except NotApplicable as e:
                    history.info("corrupt", applied=False, fault=acted_on.to_dict(), why=str(e))
                    outcomes.append(FaultOutcome(acted_on, NOT_IN_BACKEND, str(e)))
                except NothingToDamage as e:
                    history.info("corrupt", applied=False, fault=acted_on.to_dict(), why=str(e))
                    outcomes.append(FaultOutcome(acted_on, NOT_APPLICABLE, f"found nothing to damage: {e}"))
                continue
            by_fs = way == ways.FUSE and carries_out(acted_on)  # the file system logged the job, not the seam
            if not os.path.isdir(os.path.join(case_dir, "snapshots", f"job{this_job}")) or (
                by_fs and not _fired(fault_log, acted_on)
            ):
                why = "the job ended before the power-loss fault was armed"
                history.info("lose_unsynced", armed=False, why=why)
                outcomes.append(FaultOutcome(acted_on, NEVER_FIRED, why))
            else:
                states = faultplan.power_loss(
                    action.fault,
                    _snapshot(root, case_dir, this_job),
                    os.path.join(case_dir, ways.FUSE_LOGS if by_fs else "oplog", f"job{this_job}"),
                    os.path.join(case_dir, "states", f"job{this_job}"),
                )
                history.ok(
                    "lose_unsynced",
                    states=len(states["states"]),
                    explored=states["explored"],
                    summary=states["summary"],
                )
                outcomes.append(
                    FaultOutcome(acted_on, NOT_APPLICABLE if states.get("unobserved") else FIRED, states["summary"])
                )
                lost.append(states)
                job_no, found = _load_crash_states(
                    states["states"], planned, job_no, combo, scenario, case_dir, history, backend, start_method
                )
                unexpected += found
        job_no += 1
    history.close()
    events = case_history(case_dir)  # read once: the evidence and the timeline (CaseResult.history) take it
    ev = evidence(events, scenario, combo, configured, contract)
    ev.lost_unsynced = lost
    faults = fault_statuses(configured, fault_log, outcomes)
    verdicts = [run_checker(c, ev) for c in ALL]
    verdicts += judge_expect(scenario.expect, ev)
    overall, detail, extra = case_verdict(verdicts, unexpected, faults)
    return CaseResult(
        scenario.name,
        str(combo),
        overall,
        verdicts + extra,
        time.monotonic() - start,
        case_dir,
        replay,
        detail,
        fault,
        transition,
        scenario.tags,
        faults,
        history=events,
    )


def case_way(scenario: Scenario, backend: str, io: str | None) -> str:
    """seam or fuse for this case: fuse only when asked (or auto for a backend outside the seam) and some
    fault of the scenario is one the ranks' I/O must meet; nothing else needs a mount. ConfigError when an
    in-process fault has no carrier on that way (it would never fire)."""
    way = ways.resolve(io, backend)
    ways.refuse_uncarried(way, [s.fault for s in scenario.steps if s.fault is not None])
    if way == ways.FUSE and not any(s.fault is not None and carries_out(s.fault) for s in scenario.steps):
        return ways.SEAM
    return way


def _cannot_mount(
    scenario: Scenario,
    combo: Combination,
    case_dir: str,
    replay: str,
    why: str,
    start: float,
    fault: str | None,
    transition: str | None,
) -> CaseResult:
    """The case's faults needed the file system and this machine cannot mount it: nothing was probed."""
    detail = f"the fault-injecting file system cannot mount here: {why}"
    verdict = Verdict("faults", UNPROBED, detail)
    return CaseResult(
        scenario.name,
        str(combo),
        UNPROBED,
        [verdict],
        time.monotonic() - start,
        case_dir,
        replay,
        detail,
        fault,
        transition,
        scenario.tags,
        [{"fault": "every fault of the case", "status": NEVER_FIRED, "detail": detail}],
    )


def _fired(fault_log: str, fault: Fault) -> bool:
    """Whether a power-loss fault fired (the file system fires one only once a rank armed it)."""
    text = str(fault)
    return any(f.get("action") == "power_loss" and f.get("text") == text for f in read_firings(fault_log))


@dataclass(frozen=True)
class FaultOutcome:
    """What became of one fault: fired, never fired, not applicable or not in this backend (why)."""

    fault: Fault
    status: str
    detail: str

    def to_row(self) -> dict:
        return {"fault": str(self.fault), "status": self.status, "detail": self.detail}


def fault_statuses(configured: list[Fault], fault_log: str, outcomes: list[FaultOutcome]) -> list[dict]:
    """Each configured fault once, with what became of it: fired, never fired, or not applicable (why)."""
    out = []
    never = faultplan.unfired(configured, fault_log)
    for fault in configured:
        done = next((o for o in outcomes if o.fault is fault), None)
        if done is not None and done.status == NOT_IN_BACKEND:  # it never fired: nothing here to act on
            out.append(done)
        elif any(f is fault for f in never):
            out.append(FaultOutcome(fault, NEVER_FIRED, f"its trigger never came: {fault}"))
        elif done is not None:
            out.append(done)
        else:
            out.append(FaultOutcome(fault, FIRED, "fired"))
    out += [o for o in outcomes if not any(o.fault is f for f in configured)]
    return [o.to_row() for o in out]


def _load_crash_states(
    state_roots: list[str],
    planned: JobSpec,
    job_no: int,
    combo: Combination,
    scenario: Scenario,
    case_dir: str,
    history: EventLog,
    backend: str,
    start_method: str,
) -> tuple[int, list[dict]]:
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
    unexpected += _run_job(
        batch,
        job_no,
        combo,
        scenario,
        os.path.dirname(state_roots[0]),
        case_dir,
        history,
        backend,
        crash_state=f"{len(names)} states",
        start_method=start_method,
        per_event_state=True,
        timeout=scenario.timeout * len(names),
    )
    reached = _crash_states_loaded(os.path.join(case_dir, "ranks", f"job{job_no}", "rank0.jsonl"))
    last = max((names.index(n) for n in reached if n in names), default=-1)
    if unexpected or last < len(names) - 1:
        for state_root in state_roots[last + 2 if unexpected else last + 1 :]:  # past the one that ended the job
            job_no += 1
            probe = JobSpec(planned.topo, "crash_state", [{"op": "load"}])
            unexpected += _run_job(
                probe,
                job_no,
                combo,
                scenario,
                state_root,
                case_dir,
                history,
                backend,
                crash_state=os.path.basename(state_root),
                start_method=start_method,
            )
    return job_no, unexpected


def _crash_states_loaded(rank0_history: str) -> list[str]:
    """The crash states whose load ended (ok or failed) on rank 0 of a batch job."""
    return [
        e.value["crash_state"]
        for e in read_events(rank0_history)
        if e.f == "load" and e.type in (OK, FAILED) and "crash_state" in e.value
    ]


def _run_job(
    planned: JobSpec,
    job_no: int,
    combo: Combination,
    scenario: Scenario,
    root: str,
    case_dir: str,
    history: EventLog,
    backend: str,
    crash_state: str | None = None,
    start_method: str = "fork",
    way: str = ways.SEAM,
    per_event_state: bool = False,
    timeout: float | None = None,
    outcomes: list[FaultOutcome] | None = None,
) -> list[dict]:
    """Run one job; what went wrong unexpectedly. The nemesis's faults that found nothing to act on in
    this backend (a writer that is a thread of the rank) go to `outcomes`."""
    rank_dir = os.path.join(case_dir, "ranks", f"job{job_no}")
    os.makedirs(rank_dir, exist_ok=True)
    fault_log = os.path.join(case_dir, "faults.jsonl")
    snapshot_dir = os.path.join(case_dir, "snapshots", f"job{job_no}")
    fired_before = len(read_firings(fault_log))
    spec = scenario.model.in_precision(planned.precision) if planned.precision else scenario.model
    history.append(
        INVOKE,
        "job",
        job=job_no,
        kind=planned.kind,
        topology=str(planned.topo),
        ops=planned.ops,
        crash_state=crash_state,
        dtype=str(spec.precision),
    )
    if crash_state:
        way = ways.SEAM  # a crash state is only loaded, with no fault: nothing to mount
    if way == ways.FUSE and any(
        carries_out(f.fault) and isinstance(f.fault, LostUnsyncedWrites) for f in planned.faults
    ):
        from ..faults import Snapshot

        Snapshot.take(root, snapshot_dir)  # the file system logs every operation of the job from here
    with ways.job_way(way, root, case_dir, job_no, planned.faults, fault_log) as w:
        plan = RankPlan(
            spec,
            planned.topo,
            combo,
            w.root,
            rank_dir,
            planned.ops,
            job_no,
            backend,
            [f.to_dict() for f in w.in_process],
            fault_log,
            os.path.join(case_dir, "oplog", f"job{job_no}"),
            snapshot_dir,
            control=w.control,
            fs_arms=w.arms,
        )
        job = Job(
            run_plan,
            planned.topo.world,
            args=(plan,),
            timeout=timeout or scenario.timeout,
            log_dir=os.path.join(case_dir, "logs", f"job{job_no}"),
            start_method=start_method,
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
                    report=fault_log,
                ).start()
            try:
                outcome = job.wait()
            finally:
                if nemesis is not None:
                    nemesis.stop()
                    if outcomes is not None:
                        outcomes += [FaultOutcome(f, NOT_IN_BACKEND, why) for f, why in nemesis.not_applicable()]
    rank_logs = [os.path.join(rank_dir, f"rank{r}.jsonl") for r in range(planned.topo.world)]
    # a batch's ranks name the state of each load themselves
    events = rank_events(rank_logs, job_no, crash_state=None if per_event_state else crash_state)
    first = outcome.first_failure()
    why = f"rank {first.rank}: {first.describe().splitlines()[0]}" if first else ""
    merge_job(history, events, job_no, firings=read_firings(fault_log)[fired_before:], why=why or "job ended")
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
    planned_kill = bool(planned.kills) or any(
        isinstance(f.fault, (RankCrash, LostUnsyncedWrites)) for f in planned.faults
    )
    unexpected = []
    for o in sorted(outcome.outcomes, key=lambda o: o.status != "stopped"):  # a stopped rank explains the rest
        if o.status == "error" and not _is_logged_failure(events, o.rank):
            unexpected.append({"job": job_no, "rank": o.rank, "error": o.describe()})
        if o.status in ("timeout", "stopped") or (o.status == "signal" and not planned_kill):
            unexpected.append({"job": job_no, "rank": o.rank, "error": o.describe()})
    return unexpected


def _is_logged_failure(events, rank: int) -> bool:
    return any(e.type == FAILED and e.process == rank for e in events)


def evidence(
    events,
    scenario: Scenario,
    combo: Combination,
    faults_configured: list[Fault],
    contract: TopologyContract | None = None,
) -> Evidence:
    """The evidence of a case's history (resilience.runner.evidence, the same rule the cluster verdicts use)."""
    return evidence_from(
        events,
        combo=combo,
        save_topology=scenario.topology,
        never_stopped=never_stopped(scenario.model),
        faults_configured=[f.to_dict() for f in faults_configured],
        expect=scenario.expect,
        contract=contract,
        converted=precision_change(scenario.model),
    )


def _snapshot(root: str, case_dir: str, job_no: int):
    from ..faults import Snapshot

    return Snapshot(os.path.abspath(root), os.path.join(case_dir, "snapshots", f"job{job_no}"))
