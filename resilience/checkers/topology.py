"""Topology independence: each transition LOADED-EXACT, REFUSED-CLEARLY or WRONG, against the seed's table."""
from __future__ import annotations

from ..state import Topology, Transition
from ..vocab.combos import CheckpointType, Combination
from .base import FAIL, NA, PASS, REFUSED, Evidence, Verdict

LOADED_EXACT, REFUSED_CLEARLY, WRONG = "LOADED-EXACT", "REFUSED-CLEARLY", "WRONG"


def expected_loadable(combo: Combination, t: Transition) -> bool:
    """What the seed's semantics promise for a transition (DESIGN.md table)."""
    if not t.changed:
        return True
    if combo.type is CheckpointType.LEGACY:
        return set(t.changed) <= {"dp"}
    return combo.type is not CheckpointType.LOCAL  # GLOBAL and TORCH_DCP load any change


def classify(ld, ev: Evidence) -> str:
    if ld.status == "ok":
        return LOADED_EXACT if ld.fingerprint in {s.fingerprint for s in ev.saved(ld.iteration)} else WRONG
    if ld.refused and ld.error:
        return REFUSED_CLEARLY
    return WRONG


class TopologyIndependence:
    name = "topology_independence"

    def check(self, ev: Evidence) -> Verdict:
        moved = [ld for ld in ev.loads if ld.topology != str(ev.save_topology) and not ld.crash_state]
        if not moved:
            return Verdict(self.name, NA, "no load on another topology")
        rows, bad = [], []
        for ld in moved:
            t = Transition(ev.save_topology, Topology.parse(ld.topology))
            measured = classify(ld, ev)
            promised = expected_loadable(ev.combo, t)
            row = {"transition": str(t), "measured": measured, "expected": "load" if promised else "refuse",
                   "error": ld.error[:300]}
            rows.append(row)
            if measured == WRONG or (measured == REFUSED_CLEARLY and promised) \
                    or (measured == LOADED_EXACT and not promised):
                bad.append(row)
        if bad:
            return Verdict(self.name, FAIL, "; ".join(f"{r['transition']}: {r['measured']}, expected to "
                                                      f"{r['expected']}" for r in bad), rows)
        if all(r["measured"] == REFUSED_CLEARLY for r in rows):
            return Verdict(self.name, REFUSED, "; ".join(f"{r['transition']} refused clearly" for r in rows), rows)
        return Verdict(self.name, PASS, "; ".join(f"{r['transition']}: {r['measured']}" for r in rows), rows)
