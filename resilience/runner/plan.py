"""Turn a scenario's steps into jobs: rank ops per job, faults armed at an op, runner actions between."""
from __future__ import annotations

from dataclasses import dataclass, field

from ..checkpoint.combos import Combination
from ..state import Topology
from .scenario import Scenario


@dataclass
class JobSpec:
    topo: Topology
    kind: str                                          # "train", "resume" or "probe"
    ops: list[dict] = field(default_factory=list)
    faults: list[dict] = field(default_factory=list)   # {"fault": {...}, "arm_at": op index}
    kills: list[dict] = field(default_factory=list)    # external nemesis during this job
    after: list[dict] = field(default_factory=list)    # runner actions once the job ended: corrupt, lose_unsynced
    record_ops: bool = False                           # keep each rank's file operations (lost unsynced writes)


def plan_jobs(scenario: Scenario, combo: Combination) -> list[JobSpec]:
    jobs: list[JobSpec] = []
    cur = JobSpec(scenario.topology, "train")
    topo = scenario.topology

    def close():
        nonlocal cur
        jobs.append(cur)

    for step in scenario.steps:
        k, a = step.kind, step.args
        if k in ("train", "save", "finalize") and cur.after:
            close()  # training goes on after runner actions: a new job that first resumes
            cur = JobSpec(topo, "resume", [{"op": "load"}])
        if k == "train":
            cur.ops.append({"op": "train", "steps": a["steps"]})
        elif k == "save":
            cur.ops.append({"op": "save"})
        elif k == "finalize":
            cur.ops.append({"op": "finalize"})
        elif k in ("crash", "fault"):
            cur.faults.append({"fault": dict(a, kind=a.get("kind", "crash")) if k == "crash" else dict(a),
                               "arm_at": len(cur.ops), "line": step.line})
        elif k == "kill":
            cur.kills.append(dict(a, line=step.line))
        elif k in ("corrupt", "lose_unsynced"):
            cur.after.append({"kind": k, **a, "line": step.line})
            if k == "lose_unsynced":
                cur.record_ops = True
        elif k == "resume":
            close()
            topo = scenario.topology if a.get("topology", "same") == "same" else Topology.parse(a["topology"])
            cur = JobSpec(topo, "resume", [{"op": "load"}])
            if a.get("continue", 2):
                cur.ops.append({"op": "continue", "steps": a.get("continue", 2)})
    close()
    for job in jobs:
        if combo.is_async and any(op["op"] == "save" for op in job.ops):
            job.ops.append({"op": "finalize"})  # a training loop finalizes before it exits
    last_save = max((i for i, j in enumerate(jobs) if any(op["op"] == "save" for op in j.ops)), default=None)
    last_load = max((i for i, j in enumerate(jobs) if any(op["op"] == "load" for op in j.ops)), default=None)
    if last_save is not None and (last_load is None or last_load <= last_save or jobs[-1].after):
        # every scenario ends with a load, or nothing could be judged
        jobs.append(JobSpec(jobs[-1].topo, "probe", [{"op": "load"}, {"op": "continue", "steps": 2}]))
    return [j for j in jobs if j.ops or j.after]
