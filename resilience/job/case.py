"""One case of `resilience job`: a column's plan aimed through the golden run, its runs (schedule.py),
what became of its fault, the checkers' verdicts, and its result row (report.result_row.ResultRow, the
row every command writes) with its replay command.

Whether the fault fired is read from what happened, never assumed: the mount's firings for a fault on a
rank's I/O; for the whole job killed mid-save, a held write's firing and the kill made while it was held;
between saves, a kill made after the save's acknowledgement and before any file of the next save was
created (the file system's log and the kill share the monotonic clock); for damage at rest, that kill
and the damage done on disk."""

from __future__ import annotations

import dataclasses
import json
import math
import os
import time
from collections import Counter

from ..checkers.base import Verdict
from ..checkers.case import FIRED, NEVER_FIRED, NOT_APPLICABLE
from ..faults.fuse_log import read_log
from ..faults.kinds import TrackerDamage
from ..report.result_row import FaultResult, ResultRow
from ..triggers import matches_path
from ..verdicts import FAIL, FAILING, NA, PASS, REFUSED, UNKNOWN, UNPROBED, WARN, Status, worst
from .base import CaseEvidence, FaultState, RunOutcome
from .checkers import judge
from .columns import BETWEEN_SAVES, MID_SAVE, CasePlan, plan_for
from .golden import Reference
from .options import TORCHRUN, JobOptions
from .process import FS_LOG
from .schedule import Trial, run_trial

EVIDENCE = "case.json"  # the case's runs, fault and verdicts, in its folder


def between_fired(plan: CasePlan, ref: Reference, run: RunOutcome) -> tuple[bool, str]:
    """Whether the runner's kill landed between the aimed save's acknowledgement and the next save."""
    kill = plan.kill
    at = "?" if kill is None else f"step {kill.at_step}" if kill.at_step is not None else "its acknowledgement"
    if run.killed != BETWEEN_SAVES or run.killed_at is None:
        return False, f"the job was not killed at {at} ({run.ended()})"
    save = plan.save
    if save is not None and save.step in ref.golden.acks and save.step not in {a.step for a in run.observed.acks}:
        return False, f"the kill came before the save of step {save.step} was acknowledged"
    nxt = plan.next_step
    globs = [g for r in ref.layout.ranks if nxt is not None and (g := ref.layout.write_glob(nxt, r)) is not None]
    early = [
        e
        for e in read_log(os.path.join(run.folder, FS_LOG))
        if e.get("op") == "create" and e.get("t", 0) < run.killed_at and any(matches_path(g, e["path"]) for g in globs)
    ]
    if early:
        return False, f"the kill landed during the next save: {early[0]['path']} was already created"
    return True, f"killed at {at}, between the saves of steps {save.step if save else '?'} and {nxt}"


def fault_state(plan: CasePlan, ref: Reference, trial: Trial) -> FaultState:
    run = trial.runs[0]
    # the checkpoint a damage made unusable; an emptied tracker leaves every checkpoint whole
    damaged = plan.damage is not None and not isinstance(plan.damage, TrackerDamage)
    step = plan.save.step if plan.save is not None and damaged else None
    if plan.records:
        if not run.firings:
            return FaultState(NEVER_FIRED, f"its trigger never came: {plan.records[0]}")
        fired = run.firings[0]
        if plan.kill is not None and plan.kill.on_firing and run.killed != MID_SAVE:
            return FaultState(
                NEVER_FIRED, f"the write was held but the job was not killed ({run.ended()})", record=fired
            )
        done = f"{fired.get('action')} on {fired.get('op')} of {fired.get('path')} by rank {fired.get('rank')}"
        if plan.kill is not None and not plan.kill.on_firing:  # slowed, then killed between saves
            ok, why = between_fired(plan, ref, run)
            if not ok:
                return FaultState(NEVER_FIRED, f"{done}, but {why}", record=fired)
            return FaultState(FIRED, f"{done} ({len(run.firings)} firings); {why}", record=fired)
        return FaultState(
            FIRED, done + (", and the whole job killed while it was held" if plan.kill else ""), record=fired
        )
    ok, why = between_fired(plan, ref, run)
    if not ok:
        return FaultState(NEVER_FIRED, why)
    if run.node_kill is not None:
        k = run.node_kill
        rest = ", ".join(f"node {n}: {what}" for n, what in k["others"].items())
        why += f"; only node {k['node']} SIGKILLed, then {rest} ({k['waited']:g} s later)"
    if plan.chain:
        return _chain_state(plan, ref, trial, why)
    if plan.power_loss:
        if not trial.states:
            return FaultState(NEVER_FIRED, f"{why}; {trial.states_summary or 'no crash state was built'}")
        return FaultState(FIRED, f"{why}; then the power lost: {trial.states_summary}")
    if plan.damage is not None:
        if trial.damage is None:
            return FaultState(NEVER_FIRED, trial.damage_skipped or "nothing was damaged")
        return FaultState(FIRED, f"{why}; then {_damage_text(trial.damage)}", damaged_step=step, record=trial.damage)
    return FaultState(FIRED, why)


def _chain_state(plan: CasePlan, ref: Reference, trial: Trial, first: str) -> FaultState:
    """Every kill of a chained column landed between its saves, each in the restart after the one before."""
    said = [f"run 0 {first}"]
    for i, later in enumerate(plan.chain, start=1):
        if i >= len(trial.runs):
            return FaultState(NEVER_FIRED, f"{'; '.join(said)}; but the job was not restarted {i} time(s)")
        ok, why = between_fired(later, ref, trial.runs[i])
        if not ok:
            return FaultState(NEVER_FIRED, f"{'; '.join(said)}; but in run {i}: {why}")
        said.append(f"run {i} {why}")
    return FaultState(FIRED, "; ".join(said))


def _damage_text(d: dict) -> str:
    extra = ", ".join(f"{k}={v}" for k, v in d.items() if k not in ("kind", "action", "file", "rel"))
    return f"{d.get('action')} {d.get('rel')}" + (f" ({extra})" if extra else "")


def case_verdict(verdicts: list[Verdict]) -> Status:
    """FAILING first, then a refusal, then a warning, then PASS; N/A only when nothing was judged."""
    statuses = [v.status for v in verdicts]
    if any(s in FAILING for s in statuses):
        return worst(statuses)
    for s in (REFUSED, WARN, PASS):
        if s in statuses:
            return s
    return NA


def run_case(options: JobOptions, ref: Reference, column: str, case_dir: str, *, on_run=None) -> ResultRow:
    """One column's case, judged into its row; its evidence kept in `case_dir`."""
    start = time.monotonic()
    plan = plan_for(column, ref)
    if plan.kill is not None and (plan.kill.term or plan.kill.node is not None):
        plan = dataclasses.replace(plan, kill=dataclasses.replace(plan.kill, grace=options.term_grace))
    if options.restarts_by == TORCHRUN:
        from .elastic import elastic_plan

        plan = elastic_plan(plan)
    name = options.command.name
    replay = options.replay(column, ref.folder)
    if plan.na is not None:
        why = f"not applicable: {plan.na}"
        return ResultRow(
            name,
            name,
            NA,
            why,
            0.0,
            (),
            (FaultResult(column, NOT_APPLICABLE, plan.na),),
            fault=column,
            case_dir=None,
            replay=replay,
            column=column,
        )
    os.makedirs(case_dir, exist_ok=True)
    timeout = options.run_timeout(ref.golden)
    trial = run_trial(
        options.command,
        plan,
        case_dir,
        patterns=options.patterns(),
        timeout=timeout,
        max_restarts=options.max_restarts,
        between_fired=lambda run: between_fired(plan, ref, run)[0],
        on_run=on_run,
        max_states=options.max_states,
        by_torchrun=options.restarts_by == TORCHRUN,
    )
    state = fault_state(plan, ref, trial)
    if trial.states:
        verdicts, per_state = _judge_states(column, ref, trial, state, timeout)
    else:
        ev = CaseEvidence(column, ref.golden, trial.runs, state, timeout, damage=plan.damage is not None)
        verdicts, per_state = judge(ev), []
    verdict = case_verdict(verdicts)
    _keep(case_dir, plan, state, trial, verdicts, per_state, ref.golden.curve)
    _timeline(case_dir, trial)
    return ResultRow(
        name,
        name,
        verdict,
        _detail(verdict, verdicts, state),
        time.monotonic() - start,
        tuple(verdicts),
        (FaultResult(plan.what, state.status, state.detail),),
        fault=column,
        case_dir=case_dir,
        replay=replay,
        column=column,
    )


def _detail(verdict: Status, verdicts: list[Verdict], state: FaultState) -> str:
    if not state.fired:
        return f"UNPROBED: {state.detail}"
    shown = [v for v in verdicts if v.status == verdict] or verdicts
    return "; ".join(f"{v.checker}: {v.detail}" for v in shown)[:1500]


def _judge_states(
    column: str, ref: Reference, trial: Trial, state: FaultState, timeout: float
) -> tuple[list[Verdict], list[dict]]:
    """Each crash state judged on its own runs; the case's verdicts are the worst state's, each sentence
    naming the state (every state's verdicts are kept in case.json)."""
    judged = []
    for st in trial.states or ():
        verdicts = judge(CaseEvidence(column, ref.golden, st.runs, state, timeout))
        judged.append((st, verdicts, case_verdict(verdicts)))
    rank = {s: i for i, s in enumerate((FAIL, UNKNOWN, UNPROBED, REFUSED, WARN, PASS, NA))}
    worst_st, worst_verdicts, _ = min(judged, key=lambda j: (rank.get(j[2], 0), j[0].index))
    tally = ", ".join(f"{n} {v}" for v, n in Counter(str(j[2]) for j in judged).items())
    where = f"crash state {worst_st.index} of {len(judged)} ({worst_st.how}; states: {tally})"
    shown = [Verdict(v.checker, v.status, f"{where}: {v.detail}", v.evidence) for v in worst_verdicts]
    per_state = [
        {"state": st.index, "how": st.how, "path": st.path, "verdict": str(v), "runs": [r.to_dict() for r in st.runs]}
        | {"verdicts": [x.to_dict() for x in verdicts]}
        for st, verdicts, v in judged
    ]
    return shown, per_state


def _timeline(case_dir: str, trial: Trial) -> None:
    from ..report.timeline import write_job_timeline

    runs = list(trial.runs) + [r for st in trial.states or () for r in st.runs[1:]]
    write_job_timeline(
        case_dir,
        [
            {"index": r.index, "folder": r.folder, "ended": r.ended(), "killed": r.killed, "killed_at": r.killed_at}
            | {"firings": list(r.firings)}
            for r in runs
        ],
    )


def _keep(
    case_dir: str,
    plan: CasePlan,
    state: FaultState,
    trial: Trial,
    verdicts: list[Verdict],
    states: list[dict],
    golden: dict[int, float],
) -> None:
    doc = {
        "golden_curve": {str(k): v if math.isfinite(v) else str(v) for k, v in sorted(golden.items())},
        "column": plan.column,
        "fault": plan.what,
        "records": [r.to_dict() for r in plan.records],
        "damage": trial.damage,
        "fault_status": {"status": state.status, "detail": state.detail, "record": state.record},
        "runs": [r.to_dict() for r in trial.runs],
        "verdicts": [v.to_dict() for v in verdicts],
        "power_loss": {"summary": trial.states_summary, "states": states} if plan.power_loss else None,
    }
    with open(os.path.join(case_dir, EVIDENCE), "w", encoding="utf-8") as f:
        json.dump(doc, f, indent=1, default=str)


__all__ = ["between_fired", "case_verdict", "fault_state", "run_case"]
