"""Precision on resume: a load into a state of another precision (the parameters fp32 <-> bf16 with fp32
main parameters; the optimizer moments fp32 <-> bf16) is LOADED-EXACT, LOADED-CAST, REFUSED-CLEARLY,
CAST-SILENTLY or WRONG.

The values a load gave are told apart by their fingerprint against the two answers the runner computes
(evidence.converted): the exact conversion (the fp32 values kept, as bf16 training keeps them in its main
parameters) and the cast (the values rounded to bf16 and the fp32 copy rebuilt from the rounded ones, or
fp32 parameters upcast from bf16 ones). fp32 optimizer moments loaded into bf16 ones are rounded by either:
no conversion keeps them, so even the exact answer loses precision (PrecisionTargets.unavoidable). A load
that lost precision is acceptable only when the implementation said so during the load
(LoadResult.warnings, a Python warning or a log record naming the precision, on any rank); a silent one is
a FAIL by default. Training continued after the resume must match training on from the same answer. A backend
whose contract states a precision promise (vocab.contract: "load" or "refuse") is held to it; the presets
state none, so either a load or a clear refusal passes."""

from __future__ import annotations

import re

from ..vocab.contract import LOAD, REFUSE
from .base import FAIL, NA, PASS, REFUSED, UNKNOWN, Status, Verdict, worst
from .evidence import Evidence, LoadRecord

LOADED_EXACT, LOADED_CAST, REFUSED_CLEARLY = "LOADED-EXACT", "LOADED-CAST", "REFUSED-CLEARLY"
CAST_SILENTLY, WRONG = "CAST-SILENTLY", "WRONG"
# words by which a warning or an error speaks of the precision change
_PRECISION_WORDS = re.compile(r"bf16|bfloat16|fp32|float32|dtype|precision|main.?param|\bcast", re.IGNORECASE)


# what Python says about the program, never about a tensor: an unclosed file is not a word on precision
_NOT_ABOUT_DATA = re.compile(r"^warning (ResourceWarning|DeprecationWarning|PendingDeprecationWarning|ImportWarning)")
_PATHS = re.compile(r"\S*/\S*")  # a path may hold any word (a case folder named to-fp32)


def names_precision(text: str) -> bool:
    if _NOT_ABOUT_DATA.match(text or ""):
        return False
    return bool(_PRECISION_WORDS.search(_PATHS.sub(" ", text or "")))


def precision_warnings(ld: LoadRecord) -> list[str]:
    """What the implementation said about precision during the load (its own warnings and what was heard)."""
    return [w for w in ld.warnings + ld.captured if names_precision(w)]


class PrecisionOnResume:
    """`silent_cast`: the verdict of a cast nobody was told of (FAIL unless a user decides otherwise)."""

    name = "precision"

    def __init__(self, silent_cast: Status = FAIL):
        self.silent_cast = silent_cast

    def check(self, ev: Evidence) -> Verdict:
        changed = [(ld, change) for ld in ev.loads if (change := ev.precision_change(ld)) is not None]
        if not changed:
            return Verdict(self.name, NA, "no resume changed precision")
        if ev.converted is None:
            return Verdict(
                self.name,
                UNKNOWN,
                f"{len(changed)} loads changed precision, and nothing says what "
                "they must give (the evidence has no precision oracle)",
            )
        rows = [r for ld, (saved, loaded) in changed if (r := self._row(ld, saved, loaded, ev)) is not None]
        if not rows:
            return Verdict(self.name, NA, "every load that changed precision failed after a fault: not judged")
        promise = dict(ev.contract.promises).get("precision") if ev.contract is not None else None
        for r in rows:  # a backend that states a precision promise is held to it (vocab.contract)
            r["expected"] = promise or "either"
            if (promise == LOAD and r["measured"] == REFUSED_CLEARLY) or (
                promise == REFUSE and r["measured"] in (LOADED_EXACT, LOADED_CAST)
            ):
                r["problem"] = f"the backend's contract says precision changes {promise}"
        statuses = {
            LOADED_EXACT: PASS,
            LOADED_CAST: PASS,
            REFUSED_CLEARLY: REFUSED,
            CAST_SILENTLY: self.silent_cast,
            WRONG: FAIL,
        }
        status = worst(FAIL if r.get("problem") and r["measured"] != WRONG else statuses[r["measured"]] for r in rows)
        if status in (PASS, REFUSED):  # equally severe: refused only when nothing loaded
            status = REFUSED if all(r["measured"] == REFUSED_CLEARLY for r in rows) else PASS
        shown = [r for r in rows if statuses[r["measured"]] == status or r.get("problem")] if status.failing else rows
        return Verdict(self.name, status, "; ".join(_say(r) for r in shown)[:600], rows)

    def _row(self, ld: LoadRecord, saved: str, loaded: str, ev: Evidence) -> dict | None:
        row: dict = {"load_job": ld.job, "change": f"{saved}->{loaded}", "topology": ld.topology}
        if ld.status != "ok":
            row["error"] = ld.error[:300]
            if ld.refused or names_precision(ld.error):  # refused by the protocol's class, or it says why
                return dict(row, measured=REFUSED_CLEARLY)
            if ev.corrupted_before(ld.index) or ev.crashes:
                return None  # a fault may explain the failure: the fault's checkers judge it
            return dict(
                row, measured=WRONG, problem="the load failed with an error that does not name the precision change"
            )
        targets = ev.converted(ld.iteration, saved, loaded)  # type: ignore[misc,arg-type]  # checked; ok loads have one
        heard = precision_warnings(ld)
        row.update(iteration=ld.iteration, found=ld.fingerprint)
        if ld.fingerprint == targets.exact and not targets.unavoidable:
            row["measured"], how = LOADED_EXACT, "exact"
        elif ld.fingerprint == targets.exact:  # the best answer there is, and still a loss the user must hear of
            row.update(measured=LOADED_CAST if heard else CAST_SILENTLY, lost=targets.unavoidable, warned=heard[:3])
            how = "exact"
        elif ld.fingerprint == targets.cast:
            row.update(measured=LOADED_CAST if heard else CAST_SILENTLY, lost=targets.lost, warned=heard[:3])
            how = "cast"
        else:
            return dict(
                row,
                measured=WRONG,
                expected={"exact": targets.exact, "cast": targets.cast},
                problem="the loaded values are neither the exact conversion nor the cast",
                **({"warned": heard[:3]} if heard else {}),  # a word does not excuse wrong values: shown only
            )
        for iteration, fp in ld.continued:
            want = targets.after(how, iteration)
            if fp != want:
                return dict(
                    row,
                    measured=WRONG,
                    problem=f"training continued after the {how} load diverged at iteration {iteration}",
                    expected=want,
                    found=fp,
                )
        return row


def _say(row: dict) -> str:
    text = f"{row['change']} (job {row['load_job']}): {row['measured']}"
    if row.get("problem"):
        text += f", {row['problem']}"
    if row.get("lost"):
        text += f", precision lost: {row['lost']}"
    if row.get("warned"):
        text += f", warned: {row['warned'][0][:120]}"
    elif row["measured"] == CAST_SILENTLY:
        text += ", no warning"
    if row.get("error"):
        text += f": {row['error'][:160]}"
    return text
