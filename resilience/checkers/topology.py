"""Topology independence: each transition LOADED-EXACT, REFUSED-CLEARLY or WRONG, against what the backend
promises (its stated contract, else the seed's table for its combination: vocab.contract)."""

from __future__ import annotations

from ..state import Topology, Transition
from ..vocab.combos import Combination
from ..vocab.contract import LOAD, REFUSE, TopologyContract
from .base import FAIL, NA, PASS, REFUSED, Verdict
from .evidence import Evidence

LOADED_EXACT, REFUSED_CLEARLY, WRONG = "LOADED-EXACT", "REFUSED-CLEARLY", "WRONG"


def promised(combo: Combination, t: Transition, contract: TopologyContract | None = None) -> str | None:
    """LOAD or REFUSE for a transition, as `contract` (else the preset of `combo`) says; None: not stated."""
    if not t.changed:
        return LOAD
    return (contract or TopologyContract.preset(combo)).promise(t.changed)


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
        if moved and not ev.same_precision(moved):
            return Verdict(
                self.name, NA, "every load on another topology also changed precision: judged by the precision checker"
            )
        moved = ev.same_precision(moved)
        if not moved:
            return Verdict(self.name, NA, "no load on another topology")
        rows, bad = [], []
        for ld in moved:
            t = Transition(ev.save_topology, Topology.parse(ld.topology))
            measured = classify(ld, ev)
            promise = promised(ev.combo, t, ev.contract)
            row = {
                "transition": str(t),
                "measured": measured,
                "expected": promise or "either",
                "contract": str(ev.contract or TopologyContract.preset(ev.combo)),
                "error": ld.error[:300],
            }
            rows.append(row)
            if (
                measured == WRONG
                or (measured == REFUSED_CLEARLY and promise == LOAD)
                or (measured == LOADED_EXACT and promise == REFUSE)
            ):
                bad.append(row)
        if bad:
            return Verdict(
                self.name,
                FAIL,
                "; ".join(
                    f"{r['transition']}: {r['measured']}, expected to {r['expected']} ({r['contract']})" for r in bad
                ),
                rows,
            )
        if all(r["measured"] == REFUSED_CLEARLY for r in rows):
            return Verdict(self.name, REFUSED, "; ".join(f"{r['transition']} refused clearly" for r in rows), rows)
        return Verdict(self.name, PASS, "; ".join(f"{r['transition']}: {r['measured']}" for r in rows), rows)
