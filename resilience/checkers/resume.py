"""Resume equivalence: the state after a resume is the state saved, bit-exact, and training continued
after the resume ends bit-identical to training that never stopped."""

from __future__ import annotations

from ..state import Topology
from .base import FAIL, NA, PASS, Verdict
from .evidence import Evidence


class ResumeEquivalence:
    name = "resume_equivalence"

    def check(self, ev: Evidence) -> Verdict:
        loads = [ld for ld in ev.loads if ld.status == "ok"]
        if not loads:
            return Verdict(self.name, NA, "no checkpoint was loaded")
        same = ev.same_precision(loads)
        bad = []
        for ld in loads:
            saves = ev.saved(ld.iteration)
            if ld not in same:  # values in another dtype: the precision checker judges them
                bad += _rng_problems(ld, saves, ev)
                continue
            if ld.fingerprint not in {s.fingerprint for s in saves}:
                bad.append(
                    {
                        "load_job": ld.job,
                        "iteration": ld.iteration,
                        "problem": "state differs from the save",
                        "expected": sorted({str(s.fingerprint) for s in saves}),
                        "found": ld.fingerprint,
                    }
                )
            if ld.fingerprint != ev.never_stopped(ld.iteration):  # type: ignore[arg-type]  # an ok load has one
                bad.append(
                    {
                        "load_job": ld.job,
                        "iteration": ld.iteration,
                        "problem": "state differs from training that never stopped",
                        "expected": ev.never_stopped(ld.iteration),  # type: ignore[arg-type]
                        "found": ld.fingerprint,
                    }
                )
            bad += _rng_problems(ld, saves, ev)
            for iteration, fp in ld.continued:
                if fp != ev.never_stopped(iteration):
                    bad.append(
                        {
                            "load_job": ld.job,
                            "iteration": iteration,
                            "problem": "training continued after the resume diverged from training that never stopped",
                            "expected": ev.never_stopped(iteration),
                            "found": fp,
                        }
                    )
        if bad:
            return Verdict(self.name, FAIL, f"{len(bad)} mismatches after resume", bad)
        if not same:
            return Verdict(
                self.name,
                NA,
                f"every load changed precision ({len(loads)}): judged by the precision checker; RNG restored as saved",
            )
        cont = sum(len(ld.continued) for ld in same)
        return Verdict(self.name, PASS, f"{len(same)} resumes bit-exact, {cont} continued runs equal to never stopping")


def _rng_problems(ld, saves, ev: Evidence) -> list[dict]:
    same_tp_pp = _same_tp_pp(ev.save_topology, ld.topology)
    if ld.rng_restored and not same_tp_pp:
        return [
            {
                "load_job": ld.job,
                "problem": f"RNG reported restored across {ev.save_topology}->{ld.topology}, where it cannot be exact",
            }
        ]
    if ld.rng_restored and same_tp_pp and ld.rng not in {s.rng for s in saves}:
        return [
            {
                "load_job": ld.job,
                "problem": "RNG state differs from the save",
                "expected": sorted({str(s.rng) for s in saves}),
                "found": ld.rng,
            }
        ]
    return []


def _same_tp_pp(a: Topology, b: str) -> bool:
    t = Topology.parse(b)
    return (a.tp, a.pp) == (t.tp, t.pp)
