"""Run one scenario for one combination: jobs of real rank processes, faults, a merged history,
checkers, and a verdict with evidence. Every job is bounded in time; nothing is left running."""
from __future__ import annotations

import os
import re
import shlex
import time
from dataclasses import dataclass, field

from ..checkers import ALL, FAIL, NA, UNKNOWN, UNPROBED, Evidence, LoadRecord, SaveRecord, Verdict, run_checker, worst
from ..checkpoint.combos import CheckpointType, Combination
from ..faults import NothingToDamage
from ..state import Topology
from ..launch import Job
from .backends import make_backend
from .expected import never_stopped
from .history import FAIL as FAILED, INFO, INVOKE, OK, EventLog, close_open_invokes, read_events
from . import faultplan
from .plan import JobSpec, plan_jobs
from .rankprog import RankPlan, run_plan
from .scenario import Scenario


_ITER = re.compile(r"iter_(\d{7})")


@dataclass
class CaseResult:
    scenario: str
    combo: str
    verdict: str
    verdicts: list[Verdict]
    seconds: float
    case_dir: str
    replay: str
    detail: str = ""
    fault: str | None = None
    transition: str | None = None
    tags: list[str] = field(default_factory=list)

    def to_row(self) -> dict:
        return {"scenario": self.scenario, "combo": self.combo, "fault": self.fault, "transition": self.transition,
                "verdict": self.verdict, "detail": self.detail, "seconds": round(self.seconds, 3),
                "checkers": [v.to_dict() for v in self.verdicts], "case_dir": self.case_dir, "replay": self.replay}


def replay_command(scenario_file: str, combo: Combination, backend: str = "reference") -> str:
    cmd = ["resilience", "run", scenario_file, "--combos", str(combo)]
    if backend != "reference":
        cmd += ["--backend", backend]
    return " ".join(shlex.quote(c) for c in cmd)


def run_case(scenario: Scenario, combo: Combination, case_dir: str, *, backend: str | None = None,
             fault: str | None = None, transition: str | None = None, start_method: str = "fork") -> CaseResult:
    """Run `scenario` with `combo`, keeping every piece of evidence under `case_dir`."""
    backend = backend or scenario.backend
    start = time.monotonic()
    make_backend(backend, combo)  # imports the implementation here, once, not in every forked rank
    os.makedirs(case_dir, exist_ok=True)
    scenario_file = os.path.join(case_dir, "scenario.yaml")
    with open(scenario_file, "w") as f:
        f.write(scenario.to_yaml())
    history = EventLog(os.path.join(case_dir, "history.jsonl"), process="runner")
    history.info("case", scenario=scenario.name, combo=str(combo), seed=scenario.seed, backend=backend)
    root = os.path.join(case_dir, "ckpt")
    unexpected: list[dict] = []
    configured: list[dict] = []
    lost: list[dict] = []
    unobserved: list[str] = []  # power losses that could not be modelled (writes outside the seam)
    unapplied: list[str] = []  # corruptions that found nothing to damage
    fault_log = os.path.join(case_dir, "faults.jsonl")
    job_no = 0
    for spec in plan_jobs(scenario, combo):
        configured += [f["record"] for f in spec.faults] + spec.kills
        unexpected += _run_job(spec, job_no, combo, scenario, root, case_dir, history, backend,
                               start_method=start_method)
        this_job = job_no
        for action in spec.after:
            if "corrupt" in action:
                try:
                    history.ok("corrupt", **faultplan.corrupt(root, action["corrupt"]))
                except NothingToDamage as e:
                    history.info("corrupt", applied=False, fault=action["corrupt"], why=str(e))
                    unapplied.append(f"corrupt {action['corrupt']} found nothing to damage: {e}")
            elif not os.path.isdir(os.path.join(case_dir, "snapshots", f"job{this_job}")):
                history.info("lose_unsynced", armed=False, why="the job ended before the power-loss fault was armed")
            else:
                states = faultplan.power_loss(action["power_loss"], _snapshot(root, case_dir, this_job),
                                              os.path.join(case_dir, "oplog", f"job{this_job}"),
                                              os.path.join(case_dir, "states", f"job{this_job}"))
                history.ok("lose_unsynced", states=len(states["states"]), explored=states["explored"],
                           summary=states["summary"])
                if states.get("unobserved"):
                    unobserved.append(states["summary"])
                lost.append(states)
                for state_root in states["states"]:
                    job_no += 1
                    probe = JobSpec(spec.topo, "crash_state", [{"op": "load"}])
                    unexpected += _run_job(probe, job_no, combo, scenario, state_root, case_dir, history, backend,
                                           crash_state=os.path.basename(state_root), start_method=start_method)
        job_no += 1
    history.close()
    events = read_events(os.path.join(case_dir, "history.jsonl"))
    ev = evidence(events, scenario, combo, configured)
    ev.lost_unsynced = lost
    verdicts = [run_checker(c, ev) for c in ALL]
    verdicts += _expectations(scenario, ev)
    overall = worst(v.status for v in verdicts)
    detail = "; ".join(f"{v.checker}: {v.detail}" for v in verdicts if v.status == overall and overall != NA)[:500]
    if unexpected and overall != FAIL:
        overall, detail = UNKNOWN, f"a rank failed unexpectedly: {unexpected[0]['error'][:300]}"
        verdicts.append(Verdict("run", UNKNOWN, detail, unexpected))
    if unobserved and overall not in (FAIL, UNKNOWN):
        overall, detail = UNPROBED, unobserved[0]
        verdicts.append(Verdict("faults", UNPROBED, detail, [{"power_loss": u} for u in unobserved]))
    unfired = faultplan.unfired(configured, fault_log) + unapplied
    if unfired and overall not in (FAIL, UNKNOWN):
        overall, detail = UNPROBED, f"configured fault never fired: {unfired[0]}"
        verdicts.append(Verdict("faults", UNPROBED, detail, [{"fault": u} for u in unfired]))
    return CaseResult(scenario.name, str(combo), overall, verdicts, time.monotonic() - start, case_dir,
                      replay_command(scenario_file, combo, backend), detail, fault, transition, scenario.tags)


def _run_job(spec: JobSpec, job_no: int, combo: Combination, scenario: Scenario, root: str, case_dir: str,
             history: EventLog, backend: str, crash_state: str | None = None,
             start_method: str = "fork") -> list[dict] | None:
    rank_dir = os.path.join(case_dir, "ranks", f"job{job_no}")
    os.makedirs(rank_dir, exist_ok=True)
    fault_log = os.path.join(case_dir, "faults.jsonl")
    plan = RankPlan(scenario.model, spec.topo, combo, root, rank_dir, spec.ops, job_no, backend, spec.faults,
                    fault_log, os.path.join(case_dir, "oplog", f"job{job_no}"),
                    os.path.join(case_dir, "snapshots", f"job{job_no}"))
    fired_before = len(faultplan.firings(fault_log))
    history.append(INVOKE, "job", job=job_no, kind=spec.kind, topology=str(spec.topo), ops=spec.ops,
                   crash_state=crash_state)
    job = Job(run_plan, spec.topo.world, args=(plan,), timeout=scenario.timeout,
              log_dir=os.path.join(case_dir, "logs", f"job{job_no}"), start_method=start_method,
              pin_cpus=True).start()  # ranks mostly wait on each other: fewer CPUs than ranks, pin them
    nemesis = faultplan.start_nemesis(job, spec.kills, root, fault_log) if spec.kills else None
    try:
        outcome = job.wait()
    finally:
        if nemesis is not None:
            nemesis.stop()
    events = sorted((e for r in range(spec.topo.world) for e in read_events(os.path.join(rank_dir, f"rank{r}.jsonl"))),
                    key=lambda e: e.time)
    for e in events:
        e.job = job_no
        if crash_state:
            e.value["crash_state"] = crash_state
        history.write(e)
    for rec in faultplan.firings(fault_log)[fired_before:]:
        history.append(INFO, "fault", **rec)
    first = outcome.first_failure()
    why = f"rank {first.rank}: {first.describe().splitlines()[0]}" if first else ""
    for e in close_open_invokes(events, why or "job ended"):
        history.write(e)
    statuses = {o.rank: o.status for o in outcome.outcomes}
    signals = {o.rank: o.signal for o in outcome.outcomes if o.signal}
    history.append(OK if outcome.ok else INFO, "job", job=job_no, statuses=statuses, signals=signals,
                   timed_out=outcome.timed_out, seconds=round(outcome.seconds, 3))
    planned_kill = bool(spec.kills) or any(f["record"]["kind"] in ("rank_crash", "lost_unsynced_writes")
                                           for f in spec.faults)
    unexpected = []
    for o in outcome.outcomes:
        if o.status == "error" and not _is_logged_failure(events, o.rank):
            unexpected.append({"job": job_no, "rank": o.rank, "error": o.describe()})
        if o.status == "timeout" or (o.status == "signal" and not planned_kill):
            unexpected.append({"job": job_no, "rank": o.rank, "error": o.describe()})
    return unexpected


def _is_logged_failure(events, rank: int) -> bool:
    return any(e.type == FAILED and e.process == rank for e in events)


def evidence(events, scenario: Scenario, combo: Combination, faults_configured: list[dict]) -> Evidence:
    saves: dict[tuple, SaveRecord] = {}
    loads: list[LoadRecord] = []
    corruptions, crashes, fired = [], [], []
    topo_of_job: dict[int, str] = {}
    current_load: LoadRecord | None = None
    ok_ranks: dict[tuple, set] = {}
    local = combo.type is CheckpointType.LOCAL
    for i, e in enumerate(events):
        v = e.value
        if e.f == "job" and e.type == INVOKE:
            topo_of_job[v["job"]] = v["topology"]
        elif e.f == "job" and v.get("signals"):
            crashes.append({"job": v["job"], "index": i, "signals": v["signals"]})
        elif e.f == "save" and "iteration" in v:
            key = (e.job, v["iteration"])
            rec = saves.setdefault(key, SaveRecord(e.job, v["iteration"], topo_of_job.get(e.job, ""), None, None,
                                                   INFO, i))
            if e.type == INVOKE and v.get("fingerprint"):
                rec.fingerprint, rec.rng = v["fingerprint"], v.get("rng")
            elif e.type == OK and rec.status != OK:
                ok_ranks.setdefault(key, set()).add(e.process)
                # a LOCAL save is done only once every rank has its part (nothing ties the ranks together);
                # elsewhere one rank's success means the coordinator committed
                world = Topology.parse(rec.topology).world if rec.topology else 1
                if not local or len(ok_ranks[key]) == world:
                    rec.status, rec.index = OK, i
            elif e.type == FAILED:
                rec.status = FAILED
        elif e.f == "load" and e.process == 0 and e.type in (OK, FAILED):
            current_load = LoadRecord(e.job, v.get("topology", topo_of_job.get(e.job, "")), e.type, i,
                                      v.get("iteration"), v.get("fingerprint"), v.get("rng"),
                                      bool(v.get("rng_restored")), list(v.get("warnings") or []), v.get("error", ""),
                                      bool(v.get("refused")), v.get("path", ""), v.get("crash_state"))
            loads.append(current_load)
        elif e.f == "continue" and e.process == 0 and current_load is not None and current_load.job == e.job:
            current_load.continued.append((v["iteration"], v["fingerprint"]))
        elif e.f == "corrupt" and e.type == OK:  # INFO: it found nothing to damage
            corruptions.append(dict(v, index=i))
        elif e.f == "fault" and e.type in (OK, INFO):
            fired.append(v)
            if v.get("kind") == "torn_write":
                # a write that reports success but lands damaged is silent corruption of that save: no
                # writer can know, so it is judged like damage at rest (detected, never loaded wrong)
                m = _ITER.search(str(v.get("path", "")))
                corruptions.append(dict(v, index=i, iteration=int(m.group(1)) if m else None))
    return Evidence(combo, scenario.topology, sorted(saves.values(), key=lambda s: s.index), loads, corruptions,
                    crashes, [], never_stopped(scenario.model), faults_configured, fired, scenario.expect)


def _expectations(scenario: Scenario, ev: Evidence) -> list[Verdict]:
    out = []
    final = ev.loads[-1] if ev.loads else None
    want = scenario.expect.get("loaded_iteration")
    if want is not None:
        got = final.iteration if final and final.status == "ok" else None
        out.append(Verdict("expect", "PASS" if got == want else FAIL,
                           f"final load picked iteration {got}, scenario expects {want}"))
    outcome = scenario.expect.get("outcome")
    if outcome is not None:
        got = "loaded" if final and final.status == "ok" else "refused" if final and final.refused else "failed"
        out.append(Verdict("expect", "PASS" if got == outcome else FAIL, f"final load {got}, scenario expects {outcome}"))
    return out


def _snapshot(root: str, case_dir: str, job_no: int):
    from ..faults import Snapshot
    return Snapshot(os.path.abspath(root), os.path.join(case_dir, "snapshots", f"job{job_no}"))
