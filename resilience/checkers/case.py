"""A case's verdict: the checkers' verdicts, ranks that failed unexpectedly, what became of each configured
fault, and the scenario's own expectations, folded into one status with a detail that hides nothing."""

from __future__ import annotations

from ..state import Topology, Transition
from ..vocab.contract import REFUSE
from .base import FAIL, NA, PASS, UNKNOWN, UNPROBED, Status, Verdict, worst
from .evidence import Evidence
from .integrity import INERT
from .topology import promised

# what became of each configured fault (row["faults"]): anything but FIRED leaves the case UNPROBED
FIRED, NEVER_FIRED, NOT_APPLICABLE = "fired", "never fired", "not applicable"
# ... except this one: the backend has nothing the fault is about (no tracker, no manifest): N/A, not PASS
NOT_IN_BACKEND = "not in this backend"


DETAIL_LIMIT = 600  # characters of a case's detail: the sentence on its row, in every report


def case_verdict(
    verdicts: list[Verdict], unexpected: list[dict], faults: list[dict]
) -> tuple[Status, str, list[Verdict]]:
    """The case's verdict, its detail and the verdicts added to the checkers'. Nothing hides another: a FAIL
    beside a fault that never fired keeps the fault's UNPROBED in the verdicts, the row and the detail."""
    extra = []
    if unexpected:
        extra.append(Verdict("run", UNKNOWN, f"a rank failed unexpectedly: {unexpected[0]['error'][:300]}", unexpected))
    unprobed = [f for f in faults if f["status"] not in (FIRED, NOT_IN_BACKEND)]
    absent = [f for f in faults if f["status"] == NOT_IN_BACKEND]
    if absent and len(absent) == len(faults):  # nothing was tested: never a PASS
        extra.append(
            Verdict("faults", NA, f"the fault does not apply: {absent[0]['fault']}: {absent[0]['detail']}", absent)
        )
    if unprobed:
        f = unprobed[0]
        extra.append(
            Verdict(
                "faults",
                UNPROBED,
                f"configured fault {f['status']}: {f['fault']}: {f['detail']}"
                + (f"; {len(unprobed) - 1} more" if len(unprobed) > 1 else ""),
                unprobed,
            )
        )
    inert = [v for v in verdicts if v.checker == "integrity" and v.status == NA and v.detail.startswith(INERT)]
    if inert:
        extra.append(Verdict("faults", NA, f"the corruption probed nothing: {inert[0].detail}"))
    every = verdicts + extra
    overall = worst(v.status for v in every)
    if absent and len(absent) == len(faults) and overall not in (FAIL, UNKNOWN, UNPROBED):
        overall = NA
    if inert and overall == PASS:  # the damage probed nothing: the case answers nothing about it
        overall = NA
    detail = "; ".join(
        f"{v.checker}: {v.detail}" for v in every if v.status == overall and (overall != NA or v.checker == "faults")
    )
    if unprobed and overall != UNPROBED and overall in (FAIL, UNKNOWN):
        also = next(v for v in extra if v.status == UNPROBED)
        detail = f"{detail[:400]}; also {UNPROBED.value}: {also.detail}"
    if absent and len(absent) < len(faults):  # what was not probed is said, though the rest was
        detail = f"{detail[:400]}; {len(absent)} of {len(faults)} faults not in this backend: {absent[0]['detail']}"
    return overall, detail[:DETAIL_LIMIT], extra


def judge_expect(expect: dict, ev: Evidence) -> list[Verdict]:
    """The scenario's `expect:` (loaded_iteration, outcome) judged against the final load."""
    out = []
    final = ev.loads[-1] if ev.loads else None
    want = expect.get("loaded_iteration")
    refused = next((ld for ld in ev.loads if _refused_as_promised(ld, ev)), None)
    if want is not None and refused is not None:
        out.append(Verdict("expect", NA, f"the load on {refused.topology} was refused, as the combination promises"))
    elif want is not None:
        got = final.iteration if final and final.status == "ok" else None
        out.append(
            Verdict(
                "expect", PASS if got == want else FAIL, f"final load picked iteration {got}, scenario expects {want}"
            )
        )
    outcome = expect.get("outcome")
    if outcome is not None:
        result = "loaded" if final and final.status == "ok" else "refused" if final and final.refused else "failed"
        out.append(
            Verdict("expect", PASS if result == outcome else FAIL, f"final load {result}, scenario expects {outcome}")
        )
    return out


def _refused_as_promised(ld, ev: Evidence) -> bool:
    """A load on another topology, refused clearly where the backend's contract refuses that change: the
    iteration the scenario expected to load is then the topology checker's to judge, not a failure of its own."""
    if not (ld.refused and ld.error) or ld.topology == str(ev.save_topology):
        return False
    return promised(ev.combo, Transition(ev.save_topology, Topology.parse(ld.topology)), ev.contract) == REFUSE


__all__ = ["FIRED", "NEVER_FIRED", "NOT_APPLICABLE", "NOT_IN_BACKEND", "case_verdict", "judge_expect"]
