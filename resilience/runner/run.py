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
from ..faults import Fault, LostUnsyncedWrites, NothingToDamage
from ..faults.layout_damage import NotApplicable
from ..fusefs.injector import carries_out
from ..history import HISTORY_FILE, Event, EventLog, case_history
from ..objectstore.store import RunStore, current_store, is_object_store, run_store
from ..report.result_row import FaultResult, ResultRow
from ..vocab.combos import Combination
from ..vocab.contract import TopologyContract
from . import faultplan, io_route
from .adapters import BackendName, resolve_backend
from .case_jobs import CaseJobs, load_crash_states, run_job
from .evidence import evidence_from
from .fault_outcomes import FaultOutcome, fault_statuses, power_loss_fired
from .file_ops import read_file_ops
from .on_store import NO_UNSYNCED, as_on_store, at_rest, case_store, kept_as_evidence, requests_of_writes
from .oracle import never_stopped, precision_change
from .plan import Corruption, JobSpec, plan_jobs
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
    fault_column: str | None = None  # the matrix column's fault (a label; the records are the steps' faults)
    transition: str | None = None
    tags: list[str] = field(default_factory=list)
    faults: list[dict] = field(default_factory=list)  # {"fault", "status": fired/never fired/not applicable, "detail"}
    # the case's history as run_case read it, once (None: none was written); not part of the row
    history: list[Event] | None = field(default=None, repr=False, compare=False)

    def to_row(self) -> ResultRow:
        """The case's result row (report.result_row)."""
        return ResultRow(
            self.scenario,
            self.combo,
            Status(self.verdict),
            self.detail,
            self.seconds,
            tuple(self.verdicts),
            tuple(FaultResult.from_dict(f) for f in self.faults),
            self.fault_column,
            self.transition,
            self.case_dir,
            self.replay,
        )


def replay_command(scenario_file: str, combo: Combination, backend: str = "reference", io: str | None = None) -> str:
    cmd = ["resilience", "run", scenario_file, "--combos", str(combo)]
    if backend != "reference":
        cmd += ["--backend", backend]
    if io is not None and io != io_route.AUTO:  # a file that does not say how its faults reached the backend
        cmd += ["--io", io]
    return " ".join(shlex.quote(c) for c in cmd)


def run_case(
    scenario: Scenario,
    combo: Combination,
    case_dir: str,
    *,
    backend: BackendName = None,
    fault_column: str | None = None,
    transition: str | None = None,
    start_method: str = "fork",
    io: str | None = None,
    store: RunStore | None = None,
) -> CaseResult:
    """Run `scenario` with `combo`, keeping every piece of evidence under `case_dir`; `io` is the way
    in-process faults reach the implementation (runner.io_route: seam, fuse, auto). `backend`: the one the
    run resolved (runner.adapters.BackendRef), or a name resolved here; None: the scenario's. A scenario
    whose checkpoints go to an object store uses the run's `store`, or starts one for itself."""
    store = store or current_store(scenario.storage)
    if is_object_store(scenario.storage) and store is None:  # a case alone (a replay, the plugin): its own store
        with run_store(scenario.storage) as started:
            return run_case(
                scenario,
                combo,
                case_dir,
                backend=backend,
                fault_column=fault_column,
                transition=transition,
                start_method=start_method,
                io=io,
                store=started,
            )
    ref = resolve_backend(backend or scenario.backend)
    backend = ref.spec  # what the scenario file, the replay and the history name
    io = io_route.check(io or scenario.io)
    start = time.monotonic()
    ref.make(combo)  # imports the implementation here, once, not in every forked rank
    contract = ref.contract(combo)
    way = case_way(scenario, ref, io)
    os.makedirs(case_dir, exist_ok=True)
    place = case_store(scenario, store, ref, way, case_dir)
    scenario_file = os.path.join(case_dir, "scenario.yaml")
    with open(scenario_file, "w") as f:
        # the way it ran (its io, backend and one combination), so the file replays alone
        f.write(replace(scenario.as_run(combo, backend), io=io).to_yaml())
    replay = replay_command(scenario_file, combo, backend)
    if way == io_route.FUSE and (why := io_route.unavailable()) is not None:
        return _cannot_mount(scenario, combo, case_dir, replay, why, start, fault_column, transition)
    if place is not None:  # its power losses as a bucket has them (the file keeps the steps as given)
        scenario = as_on_store(scenario) if ref.through_seam else requests_of_writes(as_on_store(scenario))
    history = EventLog(os.path.join(case_dir, HISTORY_FILE), process="runner")
    # what ran, where: the history's first line
    where = {"io": way, "contract": str(contract), **({} if place is None else {"storage": str(place)})}
    history.info("case", scenario=scenario.name, combo=str(combo), seed=scenario.seed, backend=backend, **where)
    case = CaseJobs(scenario, combo, case_dir, history, ref, start_method, place)
    try:
        found = _run_jobs(case, way, _learned_layout(case, way))
    finally:
        kept_as_evidence(case)
    history.close()
    events = case_history(case_dir)  # read once: the evidence and the timeline (CaseResult.history) take it
    overall, verdicts, detail, faults = _judged(case, events, contract, found)
    return CaseResult(
        scenario.name,
        str(combo),
        overall,
        verdicts,
        time.monotonic() - start,
        case_dir,
        replay,
        detail,
        fault_column,
        transition,
        scenario.tags,
        faults,
        history=events,
    )


@dataclass
class _Findings:
    """What a case's jobs found beside their histories."""

    unexpected: list[dict] = field(default_factory=list)  # what went wrong that no fault planned
    configured: list[Fault] = field(default_factory=list)
    lost: list[dict] = field(default_factory=list)  # the power losses' crash states
    outcomes: list[FaultOutcome] = field(default_factory=list)  # the corruptions' and power losses', beside firings


def _learned_layout(case: CaseJobs, way: str):
    """The backend's file layout, learned from one clean save; None when the case aims nothing through it,
    or the backend could not save once (the case's own jobs will show it)."""
    try:
        layout = faultplan.layout_for(case.scenario, case.combo, case.backend, case.case_dir, case.start_method, io=way)
    except ResilienceError as e:
        case.history.info("layout", learned=False, why=str(e)[:500])
        return None
    if layout is not None:
        case.history.info("layout", learned=True, seam=layout.seam, layout=layout.describe())
    return layout


def _run_jobs(case: CaseJobs, way: str, layout) -> _Findings:
    """Every job of the case, each followed by its runner actions (corruptions, power losses)."""
    found = _Findings()
    root = os.path.join(case.case_dir, "ckpt")
    job_no = 0
    for planned in plan_jobs(case.scenario, case.combo, layout):
        found.configured += [f.fault for f in planned.faults + planned.kills]
        for u in planned.unreachable:  # aimed through the layout, nothing in this backend to aim at
            status = NEVER_FIRED if u.why == faultplan.OUTSIDE_SEAM else NOT_IN_BACKEND
            found.outcomes.append(FaultOutcome(u.fault, status, u.why))
        found.unexpected += run_job(case, planned, job_no, root, way=way, outcomes=found.outcomes)
        this_job = job_no
        for action in planned.after:
            if isinstance(action, Corruption):
                _corrupt(case, root, action.fault, layout, found)
            else:
                job_no = _lose_unsynced(case, root, action.fault, planned, this_job, job_no, way, found)
        job_no += 1
    return found


def _corrupt(case: CaseJobs, root: str, acted_on: Fault, layout, found: _Findings) -> None:
    """Damage the checkpoint at rest (`acted_on`: the record)."""
    history = case.history
    try:
        with at_rest(case, root):
            done = faultplan.corrupt(root, acted_on, layout)
        history.ok("corrupt", **done)
        found.outcomes.append(FaultOutcome(acted_on, FIRED, f"damaged {done.get('rel') or 'the checkpoint'}"))
    except NotApplicable as e:
        history.info("corrupt", applied=False, fault=acted_on.to_dict(), why=str(e))
        found.outcomes.append(FaultOutcome(acted_on, NOT_IN_BACKEND, str(e)))
    except NothingToDamage as e:
        history.info("corrupt", applied=False, fault=acted_on.to_dict(), why=str(e))
        found.outcomes.append(FaultOutcome(acted_on, NOT_APPLICABLE, f"found nothing to damage: {e}"))


def _lose_unsynced(
    case: CaseJobs,
    root: str,
    acted_on: LostUnsyncedWrites,
    planned: JobSpec,
    this_job: int,
    job_no: int,
    way: str,
    found: _Findings,
) -> int:
    """The disks a power loss after job `this_job` can leave, each loaded; the last job number used."""
    if case.store is not None:
        case.history.info("lose_unsynced", armed=False, why=NO_UNSYNCED)
        found.outcomes.append(FaultOutcome(acted_on, NOT_APPLICABLE, NO_UNSYNCED))
        return job_no
    by_fs = way == io_route.FUSE and carries_out(acted_on)  # the file system logged the job, not the seam
    if not os.path.isdir(case.job_dir("snapshots", this_job)) or (
        by_fs and not power_loss_fired(case.fault_log, acted_on)
    ):
        why = "the job ended before the power-loss fault was armed"
        case.history.info("lose_unsynced", armed=False, why=why)
        found.outcomes.append(FaultOutcome(acted_on, NEVER_FIRED, why))
        return job_no
    states = faultplan.power_loss(
        acted_on,
        _snapshot(root, case.case_dir, this_job),
        case.job_dir(io_route.FUSE_LOGS if by_fs else "oplog", this_job),
        case.job_dir("states", this_job),
    )
    case.history.ok(
        "lose_unsynced",
        states=len(states["states"]),
        explored=states["explored"],
        summary=states["summary"],
    )
    status = NOT_APPLICABLE if states.get("unobserved") else FIRED
    found.outcomes.append(FaultOutcome(acted_on, status, states["summary"]))
    found.lost.append(states)
    job_no, more = load_crash_states(case, states["states"], planned, job_no)
    found.unexpected += more
    return job_no


def _judged(case: CaseJobs, events: list[Event], contract: TopologyContract | None, found: _Findings):
    """The case's verdict from its history's events: (overall, every verdict, detail, each fault's status)."""
    scenario = case.scenario
    ev = evidence(events, scenario, case.combo, found.configured, contract)
    ev.lost_unsynced = found.lost
    ev.file_ops = read_file_ops(case.case_dir, os.path.join(case.case_dir, "ckpt"))
    faults = fault_statuses(found.configured, case.fault_log, found.outcomes)
    verdicts = [run_checker(c, ev) for c in ALL]
    verdicts += judge_expect(scenario.expect, ev)
    overall, detail, extra = case_verdict(verdicts, found.unexpected, faults)
    return overall, verdicts + extra, detail, faults


def case_way(scenario: Scenario, backend: BackendName, io: str | None) -> str:
    """seam, fuse or s3 for this case: fuse only when asked (or auto for a backend outside the seam) and some
    fault of the scenario is one the ranks' I/O must meet; nothing else needs a mount. A case on an object
    store takes s3 (the fault proxy and the seam) unless fuse was asked for, which check_reaches refuses.
    ConfigError when an in-process fault has no carrier on that way (it would never fire)."""
    way = io_route.resolve(io, backend)
    if is_object_store(scenario.storage) and (way != io_route.FUSE or io_route.check(io) == io_route.AUTO):
        way = io_route.OBJECT  # the fault proxy before the server, the seam in the ranks
    io_route.refuse_uncarried(way, [s.fault for s in scenario.steps if s.fault is not None])
    if way == io_route.FUSE and not any(s.fault is not None and _meets_io(s.fault) for s in scenario.steps):
        return io_route.SEAM
    return way


def _meets_io(fault) -> bool:
    """Whether the fault strikes the ranks' I/O under fuse: one the file system carries out, or a crash at a
    phase, which runner.aiming makes the operation that starts it where the backend announces no phases
    (the file system's log of the probe save shows that operation)."""
    return carries_out(fault) or (fault.layer == "inject" and fault.trigger.phase is not None)


def _cannot_mount(
    scenario: Scenario,
    combo: Combination,
    case_dir: str,
    replay: str,
    why: str,
    start: float,
    fault_column: str | None,
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
        fault_column,
        transition,
        scenario.tags,
        [{"fault": "every fault of the case", "status": NEVER_FIRED, "detail": detail}],
    )


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
        never_stopped=never_stopped(scenario.model.whole_on_one_rank(scenario.topology.tp)),
        faults_configured=[f.to_dict() for f in faults_configured],
        expect=scenario.expect,
        contract=contract,
        converted=precision_change(scenario.model),
    )


def _snapshot(root: str, case_dir: str, job_no: int):
    from ..faults import Snapshot

    return Snapshot(os.path.abspath(root), os.path.join(case_dir, "snapshots", f"job{job_no}"))
