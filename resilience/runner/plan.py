"""Turn a scenario's steps into jobs: rank ops per job, faults armed at an op, runner actions between."""
from __future__ import annotations

from dataclasses import dataclass, field

from ..faults import KINDS
from ..state import Topology
from ..vocab.combos import Combination
from .faultplan import record_of
from .scenario import FAULT_STEPS, Scenario


@dataclass
class JobSpec:
    topo: Topology
    kind: str                                          # "train", "resume", "probe" or "crash_state"
    ops: list[dict] = field(default_factory=list)
    faults: list[dict] = field(default_factory=list)   # {"record": {...}, "arm_at": op index}
    kills: list[dict] = field(default_factory=list)    # {"record": {...}, "arm_at": op index}: beside the whole job
    after: list[dict] = field(default_factory=list)    # at-rest records and power losses, once the job ended
    unreachable: list[dict] = field(default_factory=list)  # {"record", "why"}: faults that cannot apply here
    dtype: str | None = None  # the parameters' dtype of this job when a resume changed it (None: the model's)

    @property
    def power_loss(self) -> dict | None:
        return next((f["record"] for f in self.faults if f["record"]["kind"] == "lost_unsynced_writes"), None)


def plan_jobs(scenario: Scenario, combo: Combination, layout=None) -> list[JobSpec]:
    """The jobs of `scenario`; with the backend's learned `layout` every fault is aimed through it
    (faultplan.aim), and one that cannot apply is kept aside in `unreachable` with the reason."""
    jobs = _plan_jobs(scenario, combo)
    for job in jobs:
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


def _aim_job(job: JobSpec, layout) -> None:
    from .faultplan import OUTSIDE_SEAM, aim, path_wants_save
    dropped = []
    kept = []
    aimed: dict | None
    why: str | None
    for f in job.faults:
        rec = f["record"]
        if layout is not None and not layout.logged:
            aimed, why = None, OUTSIDE_SEAM
        else:
            aimed, why = aim(rec, layout, _save_iteration(job, f["arm_at"], path_wants_save(rec)))
        if aimed is None:
            job.unreachable.append({"record": rec, "why": why})
            dropped.append(rec)
        else:
            kept.append({"record": aimed, "arm_at": f["arm_at"]})
            for action in job.after:
                if action.get("power_loss") is rec:
                    action["power_loss"] = aimed
    job.faults = kept
    job.after = [a for a in job.after if not any(a.get("power_loss") is r for r in dropped)]
    kills = []
    for k in job.kills:  # a kill runs beside the whole job, but "@data" is still the next save after its step
        rec = k["record"]
        aimed, why = aim(rec, layout, _save_iteration(job, k["arm_at"], path_wants_save(rec)))
        if aimed is None:
            job.unreachable.append({"record": rec, "why": why})
        else:
            kills.append({"record": aimed, "arm_at": k["arm_at"]})
    job.kills = kills


def _plan_jobs(scenario: Scenario, combo: Combination) -> list[JobSpec]:
    jobs: list[JobSpec] = []
    cur = JobSpec(scenario.topology, "train")
    topo = scenario.topology
    for step in scenario.steps:
        k, a = step.kind, step.args
        record = record_of(k, a) if k in FAULT_STEPS else None
        layer = KINDS[record["kind"]].layer if record is not None else None  # each Fault class knows its layer
        runs_on_ranks = k in ("train", "save", "finalize") or layer in ("inject", "nemesis")
        if runs_on_ranks and any("corrupt" in x for x in cur.after):
            # training (or a fault on it) goes on after runner actions: a new job that first resumes; a
            # fault left in the ended job would be armed after its last op and never fire
            jobs.append(cur)
            cur = JobSpec(topo, "resume", [{"op": "load"}])
        if k == "train":
            cur.ops.append({"op": "train", "steps": a["steps"]})
        elif k in ("save", "finalize"):
            cur.ops.append({"op": k})
        elif record is not None:
            if layer == "inject":
                cur.faults.append({"record": record, "arm_at": len(cur.ops)})
                if record["kind"] == "lost_unsynced_writes":
                    cur.after.append({"power_loss": record})
            elif layer == "nemesis":
                cur.kills.append({"record": record, "arm_at": len(cur.ops)})
            else:
                cur.after.append({"corrupt": record})
        elif k == "resume":
            jobs.append(cur)
            topo = scenario.topology if a.get("topology", "same") == "same" else Topology.parse(a["topology"])
            cur = JobSpec(topo, "resume", [{"op": "load"}], dtype=a.get("precision"))
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
