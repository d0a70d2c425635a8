"""Durability: a save reported done survives crashes of every process and the loss of unsynced writes."""
from __future__ import annotations

from .base import FAIL, NA, PASS, Evidence, Verdict


class Durability:
    name = "durability"

    def check(self, ev: Evidence) -> Verdict:
        bad, judged = [], 0
        for ld in ev.loads:
            if ld.refused:
                continue
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
                bad.append({"load_job": ld.job, "crash_state": ld.crash_state, "acknowledged": owed,
                            "problem": f"load failed although iteration {owed} was reported saved", "error": ld.error})
            elif ld.iteration < owed:
                bad.append({"load_job": ld.job, "crash_state": ld.crash_state, "acknowledged": owed,
                            "loaded": ld.iteration, "problem": "an acknowledged save was lost"})
        if not judged:
            return Verdict(self.name, NA, "no load followed an acknowledged save")
        if bad:
            return Verdict(self.name, FAIL, f"{len(bad)} of {judged} loads lost an acknowledged save", bad)
        states = sum(1 for ld in ev.loads if ld.crash_state)
        extra = f" ({states} power-loss states)" if states else ""
        return Verdict(self.name, PASS, f"{judged} loads kept every acknowledged save{extra}")
