"""Generations: a load reads one whole save. Every save stamps its own generation number into the state
(a tensor beside each parameter's optimizer state), so two saves of one iteration differ in every file;
the generations a load finds tell whether it read save A, save B, or a mix of files of both."""

from __future__ import annotations

from typing import Any

from ..state import Topology
from .base import FAIL, NA, PASS, Verdict
from .evidence import Evidence


class Generations:
    name = "generations"

    def check(self, ev: Evidence) -> Verdict:
        stamped = {s.generation: s for s in ev.saves if getattr(s, "generation", None) is not None}
        loads = [ld for ld in ev.loads if ld.status == "ok" and getattr(ld, "generations", None)]
        if not stamped or not loads:
            return Verdict(self.name, NA, "no load reported which save's generation it read")
        bad: list[dict] = []
        read: list[dict[str, Any]] = []
        damaged = []
        for ld in loads:
            gens = ld.generations or {}
            found = list(gens.get("found") or [])
            if foreign_generations(ld, stamped) and ld.iteration in {
                c.get("iteration") for c in ev.corrupted_before(ld.index)
            }:
                damaged.append(ld)  # a stamp hit by the damage at rest: integrity judges that, not a mix
                continue
            whole = len(found) == 1 and found[0] in stamped and stamped[found[0]].iteration == ld.iteration
            where = {"load_job": ld.job, "iteration": ld.iteration, "path": ld.path, "crash_state": ld.crash_state}
            if not whole:
                bad.append(
                    dict(
                        where,
                        problem=_problem(found, stamped, ld.iteration),
                        saves={str(g): _describe(stamped.get(g), g) for g in found},
                        pieces=gens.get("pieces", {}),
                    )
                )
                continue
            source = stamped[found[0]]
            if ld.rng_restored and source.rng and ld.rng != source.rng and _same_grid(source.topology, ld.topology):
                # the RNG of each rank is drawn once per save too: it must come from the same save (on
                # another tp/pp grid it cannot be restored at all: resume equivalence judges that claim)
                other = [s for s in stamped.values() if s.rng == ld.rng]
                bad.append(
                    dict(
                        where,
                        problem=f"a mix of saves: the RNG is not the one {_name(source, found[0])} "
                        f"wrote" + (f" but that of {_name(other[0], other[0].generation)}" if other else ""),
                        read=_describe(source, found[0]),
                        rng=ld.rng,
                        expected_rng=source.rng,
                    )
                )
                continue
            newer = _newer_acknowledged(ev, source, ld)
            if newer is not None:
                bad.append(
                    dict(
                        where,
                        problem="read an earlier save of the iteration although a later one was acknowledged",
                        read=_describe(source, found[0]),
                        acknowledged=_describe(newer, newer.generation),
                    )
                )
            read.append(
                dict(
                    where,
                    save=_describe(source, found[0]),
                    saves_of_iteration=len([s for s in stamped.values() if s.iteration == ld.iteration]),
                )
            )
        if bad:
            return Verdict(
                self.name,
                FAIL,
                f"{len(bad)} of {len(loads)} loads did not read one whole save: {bad[0]['problem']}",
                bad,
            )
        if not read:
            return Verdict(self.name, NA, f"{len(damaged)} loads read stamps damaged at rest (integrity's to judge)")
        resaved = sum(r["saves_of_iteration"] > 1 for r in read)
        more = f", {resaved} of an iteration saved more than once" if resaved else ""
        return Verdict(self.name, PASS, f"{len(read)} loads each read one whole save{more}", read)


def foreign_generations(ld, stamped: dict) -> list:
    """Generations a load found that no save wrote (-1: a stamp that is no whole number)."""
    if not stamped:  # a history without stamps says nothing about them
        return []
    return [g for g in ((ld.generations or {}).get("found") or []) if g not in stamped]


def _same_grid(a: str, b: str) -> bool:
    if not a or not b:
        return True
    ta, tb = Topology.parse(a), Topology.parse(b)
    return (ta.tp, ta.pp) == (tb.tp, tb.pp)


def _problem(found: list, stamped: dict, iteration) -> str:
    if len(found) > 1:
        return "a mix of saves: pieces of the state come from " + ", ".join(_name(stamped.get(g), g) for g in found)
    if not found or found[0] not in stamped:
        return f"the state carries generation {found[0] if found else None}, which no save wrote"
    return f"the state was written by a save of iteration {stamped[found[0]].iteration}, loaded as {iteration}"


def _name(save, generation) -> str:
    if save is None:
        return f"generation {generation} (no save)"
    name = getattr(save, "save_id", "") or generation
    return f"save {name} (job {save.job}, iteration {save.iteration}, {save.status})"


def _describe(save, generation) -> dict:
    if save is None:
        return {"generation": generation, "save": None}
    return {
        "generation": generation,
        "save_id": getattr(save, "save_id", "") or str(generation),
        "job": save.job,
        "iteration": save.iteration,
        "status": save.status,
    }


def _newer_acknowledged(ev: Evidence, source, ld):
    """A save of the same iteration after `source`, acknowledged before the load, not damaged since."""
    hit = {c.get("iteration") for c in ev.corrupted_before(ld.index)}
    if ld.iteration in hit:
        return None
    later = [
        s
        for s in ev.saves
        if s.iteration == source.iteration
        and getattr(s, "generation", None) is not None
        and s.generation > source.generation
        and s.status == "ok"
        and s.index < ld.index
    ]
    return max(later, key=lambda s: s.generation or 0, default=None)  # each has a generation
