"""Durability: a save reported done survives crashes of every process and the loss of unsynced writes."""

from __future__ import annotations

from typing import Any

from ..vocab.combos import CheckpointType
from .base import FAIL, NA, PASS, Verdict
from .evidence import Evidence, SaveRecord
from .retention import culprits, first_culprit


class Durability:
    name = "durability"

    def check(self, ev: Evidence) -> Verdict:
        early = early_returns(ev)
        if early:
            more = f"; {len(early) - 1} more" if len(early) > 1 else ""
            return Verdict(self.name, FAIL, early[0]["problem"] + more, early)
        bad: list[dict[str, Any]] = []
        judged = 0
        for ld in ev.loads:
            if ld.refused or (ld.status != "ok" and ev.precision_change(ld)):
                continue  # a refusal (of a topology, of a precision change) is judged by its own checker
            if ld.status != "ok" and any(c["job"] == ld.job for c in ev.crashes):
                continue  # cut short by a rank killed in its job (a recovery racing a kill), not a lost save
            done = ev.acknowledged_before(ld.index)
            if not done:
                continue
            hit = {c.get("iteration") for c in ev.corrupted_before(ld.index)}
            # a deliberately damaged checkpoint may be skipped: integrity judges that, not durability
            owed = max((s.iteration for s in done if s.iteration not in hit), default=None)
            if owed is None:
                continue
            judged += 1
            if ld.status != "ok":
                bad.append(
                    {
                        "load_job": ld.job,
                        "crash_state": ld.crash_state,
                        "acknowledged": owed,
                        "problem": f"load failed although iteration {owed} was reported saved",
                        "error": ld.error,
                    }
                )
            elif ld.iteration < owed:  # type: ignore[operator]  # an ok load names its iteration
                bad.append(
                    {
                        "load_job": ld.job,
                        "crash_state": ld.crash_state,
                        "acknowledged": owed,
                        "loaded": ld.iteration,
                        "problem": "an acknowledged save was lost",
                    }
                )
        if not judged:
            return Verdict(self.name, NA, "no load followed an acknowledged save")
        if bad:
            for b in bad:  # who destroyed what the load missed, from the file operations the case logged
                b["culprits"] = culprits(ev, b["acknowledged"], until_job=b["load_job"])[:5]
            return Verdict(
                self.name, FAIL, f"{len(bad)} of {judged} loads lost an acknowledged save{first_culprit(bad)}", bad
            )
        states = sum(1 for ld in ev.loads if ld.crash_state)
        extra = f" ({states} power-loss states)" if states else ""
        return Verdict(self.name, PASS, f"{judged} loads kept every acknowledged save{extra}")


def early_returns(ev: Evidence) -> list[dict]:
    """Saves a rank reported done while another rank was still writing its part (a fault caught that rank
    writing, inside the same save, after the report; it never returned ok). A save that returned on some
    ranks only is not owed, but no rank may report a collective save done before every part is written.
    LOCAL saves are per rank: each rank's report speaks for its own folder only."""
    if ev.combo.type is CheckpointType.LOCAL:
        return []
    out = []
    for s in ev.saves:
        if not s.returned_at:
            continue
        rank0, first = min(s.returned_at.items(), key=lambda kv: kv[1])
        for f in ev.faults_fired:
            r, t = f.get("rank"), f.get("time")
            if f.get("job") != s.job or f.get("op") != "write" or r is None or r in s.returned_at or t is None:
                continue
            start = s.invoked_at.get(r)
            if start is None or not first < t < _next_invoke(ev.saves, s, r):
                continue
            out.append(
                {
                    "save_id": s.save_id,
                    "iteration": s.iteration,
                    "reported_by": rank0,
                    "writing": r,
                    "path": f.get("path"),
                    "fault": f.get("text") or f.get("kind"),
                    "problem": f"rank {rank0} reported save {s.save_id} (iteration {s.iteration}) done "
                    f"{t - first:.3f} s before rank {r} finished writing its part "
                    f"({f.get('text') or f.get('kind')} caught it writing {f.get('path')})",
                }
            )
            break
    return out


def _next_invoke(saves: list[SaveRecord], s: SaveRecord, rank: int) -> float:
    start = s.invoked_at[rank]
    return min(
        (o.invoked_at[rank] for o in saves if o.job == s.job and o.invoked_at.get(rank, start) > start),
        default=float("inf"),
    )
