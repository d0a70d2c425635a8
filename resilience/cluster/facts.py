"""What happened in a cluster validation, as the report shows it: the nodes and their hosts, every torchrun
attempt (which ranks ran where, with which pids), the restarts, each kill (which rank on which node, when,
where in the save), and per combination the attempt that saved it, the one that resumed it and, for a load
that was wrong, why, in one word on the same line. Read from the shared folder (rank 0, at the end)."""

from __future__ import annotations

import os

from ..faults import read_firings
from ..report.causes import row_cause
from ..report.result_row import ResultRow
from ..vocab.combos import Combination
from .spec import ClusterPlan, SharedFolder, read_json, slug


def firings_of(shared_folder: SharedFolder, combo: Combination | str) -> list[dict]:
    """The kills that fired in `combo`: in process (per rank), or by a node's file system (limited to the
    combination's folder)."""
    out = [f for path in shared_folder.fault_files(combo) for f in read_firings(path)]
    out += [
        f
        for path in shared_folder.fuse_firing_files()
        for f in read_firings(path)
        if f"/{slug(combo)}/" in str(f.get("path", ""))
    ]
    return out


def where_killed(firing: dict) -> str:
    """Where a kill struck: the phase (in process), or the byte of the file (the node's file system)."""
    if firing.get("via") == "fuse":
        at = (firing.get("fault") or {}).get("trigger", {}).get("at_byte")
        return f"byte {at} of {os.path.basename(str(firing.get('path')))} (the node's file system)"
    return f"phase {firing.get('phase') or firing.get('op')}"


def cluster_facts(plan: ClusterPlan, shared_folder: SharedFolder, rows: list[ResultRow]) -> dict:
    """JSON-ready facts of the run for report.view (meta["cluster"])."""
    recorded = read_json(shared_folder.plan, {})
    attempts = read_json(shared_folder.path("attempts.json"), [])
    start = recorded.get("started") or (attempts[0]["time"] if attempts else 0.0)
    where: dict[tuple, dict] = {}  # (attempt, rank) -> its node, host and pid
    out_attempts = []
    for a in attempts:
        nodes: dict[int, dict] = {}
        for r in a.get("ranks", []):
            where[(a["attempt"], r["rank"])] = r
            n = nodes.setdefault(
                r["group_rank"],
                {
                    "node": r["group_rank"],
                    "host": r["host"],
                    "ranks": [],
                    "pids": [],
                    "restart_count": r["restart_count"],
                },
            )
            n["ranks"].append(r["rank"])
            n["pids"].append(r["pid"])
        out_attempts.append(
            {"attempt": a["attempt"], "at": round(a["time"] - start, 3), "nodes": [nodes[k] for k in sorted(nodes)]}
        )
    first = out_attempts[0]["nodes"] if out_attempts else []
    kills, combos = [], []
    by_combo = {r.combo: r for r in rows}
    for combo in plan.combos:
        st = read_json(shared_folder.state(combo), {})
        for f in firings_of(shared_folder, combo):
            attempt = st.get("save_started")
            rank = f.get("rank")
            seat = where.get((attempt, rank), {})
            kills.append(
                {
                    "combo": combo,
                    "attempt": attempt,
                    "rank": rank,
                    "node": seat.get("group_rank"),
                    "host": seat.get("host"),
                    "pid": f.get("pid"),
                    "at": round(float(f["time"]) - start, 3) if f.get("time") else None,
                    "where": where_killed(f),
                }
            )
        row = by_combo.get(combo)
        cause, why = row_cause(row)
        combos.append(
            {
                "combo": combo,
                "saved_on": st.get("save_started"),
                "resumed_on": st.get("resume_started"),
                "kill": "fired"
                if any(k["combo"] == combo for k in kills)
                else "armed, never fired"
                if st.get("kill_armed")
                else "none",
                "verdict": row.verdict.value if row is not None else "?",
                "cause": cause,
                "why": why or (row.detail if row is not None else ""),
            }
        )
    return {
        "run_id": recorded.get("run_id"),
        "world": recorded.get("world"),
        "topology": recorded.get("topology"),
        "nodes": [{"node": n["node"], "host": n["host"], "ranks": n["ranks"]} for n in first],
        "attempts": out_attempts,
        "restarts": max(0, len(out_attempts) - 1),
        "kills": kills,
        "combos": combos,
    }
