"""Judging a cluster validation: per combination, from rank 0's history on the shared folder, the fault
firings and the disk; then the summary of the whole run (rank 0, last attempt)."""

from __future__ import annotations

import os
import time

from ..checkers import (
    FAIL,
    NA,
    PASS,
    UNKNOWN,
    UNPROBED,
    AtomicCommit,
    Durability,
    Evidence,
    LoadRecord,
    ResumeEquivalence,
    SaveOutcomes,
    Status,
    Verdict,
    is_failing,
    run_checker,
    worst,
)
from ..history import read_events
from ..report.result_row import ResultRow
from ..runner.evidence import evidence_from
from ..runner.oracle import NeverStopped
from ..state import Topology
from ..verdicts import summary_line
from ..vocab import CheckpointType, Combination, on_every_rank, versions
from ..vocab.folders import LOCAL_FOLDER
from .facts import cluster_facts, firings_of
from .spec import CONTINUE_STEPS, TRAIN_BEFORE, ClusterPlan, SharedFolder, read_json, write_json

SUMMARY_FORMAT = "resilience-cluster-validation"
SUMMARY_VERSION = 1


def newest_valid(backend, root: str, combo: Combination) -> int | None:
    """The newest iteration a correct loader must pick, from the backend's own listing (this process only):
    complete, and for LOCAL complete in every rank's folder (vocab.on_every_rank)."""
    found = [c for c in backend.list_checkpoints(root) if c.complete]
    if combo.type is CheckpointType.LOCAL:
        folders: dict[str, set] = {}
        for c in found:
            folders.setdefault(os.path.dirname(c.path), set()).add(c.iteration)
        local = os.path.join(os.path.abspath(root), LOCAL_FOLDER)
        ranks = [n for n in os.listdir(local)] if os.path.isdir(local) else []
        per_rank = [folders.get(os.path.join(local, n), set()) for n in ranks] or list(folders.values())
        return next(iter(on_every_rank(per_rank)), None)
    return max((c.iteration for c in found), default=None)


def _evidence(
    plan: ClusterPlan, shared_folder: SharedFolder, combo: Combination, topo: Topology, firings: list[dict]
) -> Evidence:
    # every rank's history (its events name their combination): a save is acknowledged only once it
    # returned on every rank
    label = str(combo)
    events = sorted(
        (e for r in range(topo.world) for e in read_events(shared_folder.history(r)) if e.value.get("combo") == label),
        key=lambda e: (e.job, e.time),
    )
    ev = evidence_from(
        events,
        combo=combo,
        save_topology=topo,
        never_stopped=NeverStopped(plan.spec),
        topology=str(topo),
    )
    ev.crashes = [{"job": f.get("attempt"), "index": 0, "signals": {f.get("rank"): 9}} for f in firings]
    ev.faults_fired = [dict(f, job=f.get("attempt")) for f in firings]
    return ev


def combination_row(
    plan: ClusterPlan,
    shared_folder: SharedFolder,
    combo: Combination,
    topo: Topology,
    attempt: int,
    newest: int | None,
    after: int | None,
    seconds: float,
    command: str = "",
) -> ResultRow:
    """The result row of one combination, after its resume phase (rank 0)."""
    st = read_json(shared_folder.state(combo), {})
    firings = firings_of(shared_folder, combo)
    for f in firings:
        f["attempt"] = st.get("save_started")
    ev = _evidence(plan, shared_folder, combo, topo, firings)
    verdicts = [run_checker(c, ev) for c in (AtomicCommit(), Durability(), ResumeEquivalence())]
    verdicts.append(_restart_verdict(plan, combo, st, firings, attempt, topo.world))
    load = ev.loads[-1] if ev.loads else None
    verdicts.append(_newest_verdict(load, newest, after))
    verdicts.append(run_checker(SaveOutcomes(), ev))  # last: rows keep the order readers index them by
    status = worst(v.status for v in verdicts)
    return row_of(
        plan,
        shared_folder,
        combo,
        status,
        _detail(status, verdicts, load, newest, st, firings),
        verdicts,
        seconds,
        command,
    )


def _restart_verdict(
    plan: ClusterPlan, combo: Combination, st: dict, firings: list[dict], attempt: int, world: int
) -> Verdict:
    name = "kill_and_restart"
    saved_on = st.get("save_started")
    if firings:
        f = firings[0]
        where = f.get("phase") or f.get("op") or "?"
        if attempt <= (saved_on or 0):
            return Verdict(name, FAIL, f"resumed on attempt {attempt}, not after the kill of attempt {saved_on}")
        how = (
            f"rank {f.get('rank')} (its process pid {f.get('pid')}) was SIGKILLed at {_where(f)}"
            if f.get("via") == "fuse"
            else f"rank {f.get('rank')} SIGKILLed itself at phase {where}"
        )
        return Verdict(
            name,
            PASS,
            f"{how} of the save of iteration {sum(TRAIN_BEFORE)} on attempt {saved_on}; "
            f"torchrun restarted the group and attempt {attempt} resumed",
            firings[:1],
        )
    if "save_done" not in st:
        return Verdict(
            name,
            UNKNOWN,
            f"the save phase of attempt {saved_on} was cut short by a failure other than "
            f"the planned kill (see the node logs)",
        )
    if st.get("kill_armed"):
        return Verdict(
            name,
            UNPROBED,
            f"the planned kill never fired: rank {plan.kill_target(world)} does not "
            f"reach phase {plan.kill_phase} in {combo} (some phases are the "
            f"coordinator's only: choose another --kill-phase or --kill-rank)",
        )
    if attempt > (saved_on or 0):
        return Verdict(
            name,
            PASS,
            f"saved on attempt {saved_on} (no kill planned for it); resumed on attempt "
            f"{attempt} after torchrun restarted the group",
        )
    return Verdict(name, NA, "no kill planned for this combination")


def _newest_verdict(load: LoadRecord | None, newest: int | None, after: int | None) -> Verdict:
    name = "newest_valid"
    if load is None or load.status != "ok":
        why = load.error if load is not None else "no load was recorded"
        return Verdict(
            name,
            FAIL,
            f"nothing was loaded although iteration {newest} is valid on disk: {why}"
            if newest is not None
            else f"no valid checkpoint on disk and nothing loaded: {why}",
        )
    if load.iteration != newest:
        return Verdict(
            name,
            FAIL,
            f"loaded iteration {load.iteration}, but the newest valid checkpoint on disk is iteration {newest}",
        )
    want = load.iteration + CONTINUE_STEPS  # type: ignore[operator]  # an ok load names its iteration
    if after != want:
        return Verdict(
            name,
            FAIL,
            f"the save of iteration {want} after the resume did not become the newest "
            f"valid checkpoint (newest: {after})",
        )
    return Verdict(
        name,
        PASS,
        f"loaded iteration {newest}, the newest valid on disk; iteration {want}, saved "
        f"after training on, is now the newest",
    )


def _where(firing: dict) -> str:
    """Where a kill struck: the phase (in process), or the byte of the file (the node's file system)."""
    if firing.get("via") == "fuse":
        at = (firing.get("fault") or {}).get("trigger", {}).get("at_byte")
        return f"byte {at} of {os.path.basename(str(firing.get('path')))} (the node's file system)"
    return str(firing.get("phase") or firing.get("op"))


def _detail(
    status: Status, verdicts: list[Verdict], load: LoadRecord | None, newest, st: dict, firings: list[dict]
) -> str:
    if status not in (PASS, NA):
        return "; ".join(f"{v.checker}: {v.detail}" for v in verdicts if v.status == status)[:600]
    killed = sum(TRAIN_BEFORE)
    cut = (
        f"the save of iteration {killed} was cut by the kill at {_where(firings[0])}"
        if firings
        else "no kill in this combination"
    )
    assert load is not None and load.iteration is not None  # a PASS has a load (_newest_verdict)
    return (
        f"{cut}; resumed iteration {load.iteration} (newest valid) on attempt {load.job}, bit-exact; "
        f"{CONTINUE_STEPS} more steps equal to training that never stopped; saved iteration "
        f"{load.iteration + CONTINUE_STEPS}"
    )


def row_of(
    plan: ClusterPlan,
    shared_folder: SharedFolder,
    combo: Combination,
    status: Status,
    detail: str,
    verdicts: list[Verdict],
    seconds: float,
    command: str = "",
) -> ResultRow:
    """The result row of one combination, as `resilience run` and `matrix` write theirs."""
    return ResultRow(
        "cluster-kill-resume",
        str(combo),
        Status(status),
        detail,
        seconds,
        tuple(verdicts),
        fault=f"rank_crash phase={plan.kill_phase}",
        case_dir=shared_folder.ckpt(combo),
        replay=command or read_json(shared_folder.plan, {}).get("command", ""),
        column=f"kill@{plan.kill_phase}",
    )


def finish(plan: ClusterPlan, shared_folder: SharedFolder, attempt: int, command: str = "") -> int:
    """Rank 0: once every combination has a result, write the report and the summary; the exit status."""
    from ..report import write_run_files

    missing = [c for c in plan.combos if not os.path.exists(shared_folder.result(c))]
    if missing:
        print(f"[attempt {attempt}] no result yet for {', '.join(missing)}", flush=True)
        return 1
    rows = [ResultRow.from_dict(read_json(shared_folder.result(c))) for c in plan.combos]
    recorded = read_json(shared_folder.plan, {})
    facts = cluster_facts(plan, shared_folder, rows)
    meta = {
        "title": "resilience validate: cluster kill and resume",
        "seed": plan.spec.seed,
        "backend": plan.backend,
        "command": command or recorded.get("command", ""),
        "kind": "validate",
        "cluster": facts,
    }
    paths = write_run_files(shared_folder.report, rows, meta)
    # a combination where nothing could be judged did not validate either
    bad = [r for r in rows if is_failing(r.verdict) or r.verdict == NA]
    summary = {
        "format": SUMMARY_FORMAT,
        "version": SUMMARY_VERSION,
        "ok": not bad,
        "exit_status": 1 if bad else 0,
        "run_id": recorded.get("run_id"),
        "world": recorded.get("world"),
        "topology": recorded.get("topology"),
        "attempts": attempt + 1,
        "finished": time.time(),
        "versions": versions(),
        "plan": plan.to_dict(),
        "nodes": facts["nodes"],
        "restarts": facts["restarts"],
        "kills": facts["kills"],
        "results": [
            {"combo": r.combo, "verdict": r.verdict.value, "detail": r.detail, "cause": c["cause"]}
            for r, c in zip(rows, facts["combos"])
        ],
        "report": {k: os.path.relpath(v, shared_folder.root) for k, v in paths.items()},
    }
    write_json(shared_folder.summary, summary)
    print(render_summary(summary, shared_folder.root), flush=True)
    return summary["exit_status"]


def render_summary(summary: dict, root: str) -> str:
    """What a person reads at the end of a validation run."""
    width = max(len(r["combo"]) for r in summary["results"])
    lines = [
        f"cluster validation {summary.get('run_id') or ''}: world {summary.get('world')} as "
        f"{Topology.from_dict(summary['topology']) if summary.get('topology') else '?'}, "
        f"{summary.get('attempts')} torchrun attempts; " + ", ".join(f"{k} {v}" for k, v in summary["versions"].items())
    ]
    nodes = summary.get("nodes") or []
    if nodes:
        lines.append(
            "  nodes: " + "; ".join(f"node {n['node']} on {n['host']} (ranks {_ranks(n['ranks'])})" for n in nodes)
        )
    for k in summary.get("kills") or []:
        lines.append(
            f"  killed: rank {k['rank']} (node {k.get('node')}, {k.get('host')}, pid {k.get('pid')}) at "
            f"{k['where']} of {k['combo']} on attempt {k['attempt']}"
            + (f", {k['at']:.1f} s into the run" if k.get("at") is not None else "")
        )
    for r in summary["results"]:
        cause = f"{r['cause']}: " if r.get("cause") else ""
        lines.append(f"  {r['combo']:<{width}}  {r['verdict']:<8}  {cause}{r['detail'][:200]}")
    verdicts = [r["verdict"] for r in summary["results"]]
    # the summary rule of every command; a combination that judged nothing (N/A) did not validate either
    note = " (N/A validates nothing: exit status 1)" if NA in verdicts else ""
    lines.append(f"{summary_line(verdicts)}{note}; report: {os.path.join(root, summary['report']['report.md'])}")
    return "\n".join(lines)


def _ranks(ranks: list[int]) -> str:
    return (
        f"{ranks[0]}-{ranks[-1]}"
        if len(ranks) > 2 and ranks == list(range(ranks[0], ranks[-1] + 1))
        else ", ".join(map(str, ranks))
    )


def read_summary(shared_folder: SharedFolder) -> dict | None:
    doc = read_json(shared_folder.summary)
    if doc is not None and (doc.get("format") != SUMMARY_FORMAT or doc.get("version", 0) > SUMMARY_VERSION):
        return None
    return doc


__all__ = ["combination_row", "finish", "newest_valid", "read_summary", "render_summary", "row_of"]
