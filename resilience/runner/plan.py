"""Turn a scenario's steps into jobs: rank ops per job, faults armed at an op, runner actions between."""

from __future__ import annotations

from dataclasses import dataclass, field

from ..faults import Fault, LostUnsyncedWrites, WriterKill
from ..faults.layout import Layout
from ..state import Topology
from ..vocab.combos import Combination
from .aiming import NO_WRITER, OUTSIDE_SEAM, aim, path_wants_save
from .scenario import Scenario


@dataclass(frozen=True)
class ArmedFault:
    """A fault and the rank operation from which it watches (its index in the job's ops): in-process
    faults are installed there, a nemesis fault's "@data" is the next save after it."""

    fault: Fault
    arm_at: int

    def to_dict(self) -> dict:
        """JSON-ready, as it crosses to the rank processes (RankJob)."""
        return {"fault": self.fault.to_dict(), "arm_at": self.arm_at}


@dataclass(frozen=True)
class Unreachable:
    """A fault that cannot apply to this backend, and why (aimed through its layout)."""

    fault: Fault
    why: str


@dataclass(frozen=True)
class Corruption:
    """After the job: damage the checkpoint at rest."""

    fault: Fault


@dataclass(frozen=True)
class PowerLoss:
    """After the job: build every disk the power loss of this (armed) fault can leave, and load each."""

    fault: LostUnsyncedWrites


AfterJob = Corruption | PowerLoss  # what the runner does once a job ended


@dataclass
class JobSpec:
    """One job of a case: its ranks' ops and the faults around them."""

    topo: Topology
    kind: str  # "train", "resume", "probe" or "crash_state"
    ops: list[dict] = field(default_factory=list)
    faults: list[ArmedFault] = field(default_factory=list)  # in process, on the ranks
    kills: list[ArmedFault] = field(default_factory=list)  # from outside, beside the whole job
    after: list[AfterJob] = field(default_factory=list)  # once the job ended, in order
    unreachable: list[Unreachable] = field(default_factory=list)  # faults that cannot apply here
    precision: str | None = None  # this job's precision when a resume changed it ('bf16', ...; None: the model's)
    stagger: float = 0.0  # seconds every rank but rank 0 starts late (a start-up that crosses a wall-clock second)


def plan_jobs(scenario: Scenario, combo: Combination, layout: Layout | None = None) -> list[JobSpec]:
    """The jobs of `scenario`; with the backend's learned `layout` every fault is aimed through it
    (aiming.aim), and one that cannot apply is kept aside in `unreachable` with the reason."""
    jobs = _plan_jobs(scenario, combo)
    for job in jobs:
        if not combo.is_async:
            job.unreachable += [Unreachable(a.fault, NO_WRITER) for a in job.kills if isinstance(a.fault, WriterKill)]
            job.kills = [a for a in job.kills if not isinstance(a.fault, WriterKill)]
        _aim_job(job, layout)
    return jobs


def _save_iteration(job: JobSpec, arm_at: int, nth: int) -> int | None:
    """The iteration of the nth save at or after op `arm_at`, when the job starts from scratch."""
    if job.kind != "train":
        return None
    iteration, count = 0, 0
    for i, op in enumerate(job.ops):
        if op["op"] == "train":
            iteration += int(op.get("steps", 1))
        elif op["op"] == "save" and i >= arm_at:
            count += 1
            if count == nth:
                return iteration
    return None


def _aim_job(job: JobSpec, layout: Layout | None) -> None:
    """Aim every fault of the job through the layout; those that cannot apply go to `unreachable`, and a
    power loss is built from its fault as aimed, or not at all."""
    if layout is not None and not layout.logged:  # nothing of its saves went through the seam
        placed: list[ArmedFault | Unreachable] = [Unreachable(a.fault, OUTSIDE_SEAM) for a in job.faults]
    else:
        placed = [_aim(job, a, layout) for a in job.faults]
    became = {id(a.fault): p for a, p in zip(job.faults, placed)}
    after: list[AfterJob] = []
    for action in job.after:
        now = became.get(id(action.fault)) if isinstance(action, PowerLoss) else None
        if now is None:
            after.append(action)
        elif isinstance(now, ArmedFault) and isinstance(now.fault, LostUnsyncedWrites):
            after.append(PowerLoss(now.fault))
    # a kill runs beside the whole job, but "@data" is still the next save after its step
    kills = [_aim(job, a, layout) for a in job.kills]
    job.faults = [p for p in placed if isinstance(p, ArmedFault)]
    job.kills = [p for p in kills if isinstance(p, ArmedFault)]
    job.unreachable += [p for p in placed + kills if isinstance(p, Unreachable)]
    job.after = after


def _aim(job: JobSpec, armed: ArmedFault, layout: Layout | None) -> ArmedFault | Unreachable:
    aimed, why = aim(armed.fault, layout, _save_iteration(job, armed.arm_at, path_wants_save(armed.fault)))
    return ArmedFault(aimed, armed.arm_at) if aimed is not None else Unreachable(armed.fault, why or "")


def _plan_jobs(scenario: Scenario, combo: Combination) -> list[JobSpec]:
    jobs: list[JobSpec] = []
    cur = JobSpec(scenario.topology, "train")
    topo = scenario.topology
    for step in scenario.steps:
        k, a, fault = step.kind, step.args, step.fault
        layer = fault.layer if fault is not None else None
        runs_on_ranks = k in ("train", "save", "finalize", "recover") or layer in ("inject", "nemesis")
        if runs_on_ranks and any(isinstance(x, Corruption) for x in cur.after):
            # training (or a fault on it) goes on after runner actions: a new job that first resumes; a
            # fault left in the ended job would be armed after its last op and never fire
            jobs.append(cur)
            cur = JobSpec(topo, "resume", [{"op": "load"}])
        if k == "train":
            cur.ops.append({"op": "train", "steps": a["steps"]})
        elif k in ("save", "finalize", "recover"):
            cur.ops.append({"op": k})
        elif fault is not None:
            if layer == "inject":
                cur.faults.append(ArmedFault(fault, len(cur.ops)))
                if isinstance(fault, LostUnsyncedWrites):
                    cur.after.append(PowerLoss(fault))
            elif layer == "nemesis":
                cur.kills.append(ArmedFault(fault, len(cur.ops)))
            else:
                cur.after.append(Corruption(fault))
        elif k == "resume":
            # a rank's fault given after the job's last operation would never fire there: it strikes the
            # resume's own load (a power loss after the last operation stays: it is the job's end)
            late = [f for f in cur.faults if f.arm_at == len(cur.ops) and not isinstance(f.fault, LostUnsyncedWrites)]
            cur.faults = [f for f in cur.faults if all(f is not x for x in late)]
            jobs.append(cur)
            topo = scenario.topology if a.get("topology", "same") == "same" else Topology.parse(a["topology"])
            cur = JobSpec(topo, "resume", [{"op": "load"}], precision=a.get("precision"), stagger=a.get("stagger", 0.0))
            cur.faults = [ArmedFault(f.fault, 0) for f in late]
            if a.get("continue", 2):
                cur.ops.append({"op": "continue", "steps": a.get("continue", 2)})
    jobs.append(cur)
    for job in jobs:
        if combo.is_async and any(op["op"] == "save" for op in job.ops):
            job.ops.append({"op": "finalize"})  # a training loop finalizes before it exits
    last_save = max((i for i, j in enumerate(jobs) if any(op["op"] == "save" for op in j.ops)), default=None)
    last_load = max((i for i, j in enumerate(jobs) if any(op["op"] == "load" for op in j.ops)), default=None)
    if last_save is not None and (last_load is None or last_load <= last_save or jobs[-1].after):
        # every scenario ends with a load, or nothing could be judged
        jobs.append(JobSpec(jobs[-1].topo, "probe", [{"op": "load"}, {"op": "continue", "steps": 2}]))
    return [j for j in jobs if j.ops or j.after]
