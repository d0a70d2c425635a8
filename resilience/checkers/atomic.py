"""Atomic commit: whatever a loader picks after any crash is complete and exactly what one save wrote."""

from __future__ import annotations

from .base import FAIL, NA, PASS, Verdict
from .evidence import Evidence
from .retention import culprits, faults_during, first_culprit


class AtomicCommit:
    name = "atomic_commit"

    def check(self, ev: Evidence) -> Verdict:
        loads = ev.same_precision([ld for ld in ev.loads if ld.status == "ok"])
        if not loads:
            return Verdict(
                self.name,
                NA,
                "no checkpoint was loaded in the dtype it was saved in"
                if any(ld.status == "ok" for ld in ev.loads)
                else "no checkpoint was loaded",
            )
        bad: list[dict] = []
        for ld in loads:
            candidates = ev.saved(ld.iteration)
            if not candidates:
                bad.append(
                    {
                        "load_job": ld.job,
                        "iteration": ld.iteration,
                        "path": ld.path,
                        "crash_state": ld.crash_state,
                        "problem": "loaded an iteration that no save wrote",
                    }
                )
            elif _failed_took_effect(ld, candidates):
                bad.append(
                    {
                        "load_job": ld.job,
                        "iteration": ld.iteration,
                        "path": ld.path,
                        "crash_state": ld.crash_state,
                        "problem": "loaded what a save wrote that failed on every rank: a save reported failed "
                        "took effect (when it cannot tell, it must not say it failed)",
                        "failed_save": True,
                    }
                )
            elif ld.fingerprint not in {s.fingerprint for s in candidates}:
                bad.append(
                    {
                        "load_job": ld.job,
                        "iteration": ld.iteration,
                        "path": ld.path,
                        "crash_state": ld.crash_state,
                        "expected": sorted({s.fingerprint for s in candidates}, key=str),
                        "found": ld.fingerprint,
                        "problem": "loaded state matches no save of that iteration (torn or mixed)",
                    }
                )
        if bad:
            for b in bad:  # what wrote over, cut or replaced the files of the iteration the load read
                b["culprits"] = (
                    culprits(ev, b["iteration"], until_job=b["load_job"], any_save=True)
                    + faults_during(ev, b["iteration"], until_job=b["load_job"])
                )[:5]
            return Verdict(
                self.name,
                FAIL,
                f"{len(bad)} of {len(loads)} loads returned {_what(bad)}{first_culprit(bad)}",
                bad,
            )
        crashed = " after a crash" if ev.crashes else ""
        return Verdict(self.name, PASS, f"{len(loads)} loads{crashed}, each exactly what one save wrote")


def _failed_took_effect(ld, candidates) -> bool:
    """The load's state is what some save of its iteration wrote, and every such save failed on every rank
    (Jepsen's rule: a failed operation did not happen; one that may have is indeterminate, never failed)."""
    same = [s for s in candidates if s.fingerprint is not None and s.fingerprint == ld.fingerprint]
    return bool(same) and all(_failed_everywhere(s) for s in same)


def _failed_everywhere(s) -> bool:
    """Every rank of the save raised: none was killed or left without an answer (then it is indeterminate)."""
    return s.status == "fail" and bool(s.world) and len(s.errors) >= s.world


def _what(bad: list[dict]) -> str:
    if all(b.get("failed_save") for b in bad):
        return "what a failed save wrote: a save reported failed took effect"
    return "a state no save wrote"
