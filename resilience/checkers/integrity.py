"""Integrity: corruption is detected (fallback or a clear error) or avoided; never loaded as wrong values."""

from __future__ import annotations

import os

from .base import FAIL, NA, PASS, Verdict
from .evidence import Evidence
from .generations import foreign_generations

INERT = "the damage changed no value the load returns"


class Integrity:
    name = "integrity"

    def check(self, ev: Evidence) -> Verdict:
        if not ev.corruptions:
            return Verdict(self.name, NA, "no corruption in this scenario")
        ran = _planted_code_ran(self.name, ev)
        if ran is not None:
            return ran
        first = min(c["index"] for c in ev.corruptions)
        after = ev.same_precision([ld for ld in ev.loads if ld.index > first])
        if not after:
            return Verdict(
                self.name,
                NA,
                "no load after the corruption"
                + (" in the dtype it was saved in" if any(ld.index > first for ld in ev.loads) else ""),
            )
        bad, detected, missed = [], 0, []
        hit = {c.get("iteration") for c in ev.corruptions}
        stamped = {s.generation: s for s in ev.saves if getattr(s, "generation", None) is not None}
        for ld in after:
            if ld.status != "ok":
                detected += 1  # a clear refusal is a correct answer to damage
                continue
            wrong = _wrong_values(ld, ev, hit, stamped)
            if wrong is not None:
                bad.append(wrong)
            elif ld.iteration in hit and not ld.warnings:
                missed.append(ld)  # loaded the damaged iteration with right values: the damage missed what was read
            else:
                detected += 1
        if bad:
            return Verdict(self.name, FAIL, f"{len(bad)} loads returned wrong values after corruption", bad)
        planted = any(c.get("marker") for c in ev.corruptions)  # its probe is the marker: no code ran
        if missed and not detected and not planted:  # nothing was probed: the loader neither noticed nor had to
            return Verdict(
                self.name,
                NA,
                f"{INERT} ({len(missed)} loads read the "
                "damaged iteration without a warning and got exactly what was saved)",
                [{"corruption": c.get("rel") or c.get("file"), "detail": c.get("detail")} for c in ev.corruptions],
            )
        return Verdict(
            self.name,
            PASS,
            f"corruption detected or avoided on {len(after)} loads",
            [{"warnings": ld.warnings[:3], "error": ld.error} for ld in after if ld.warnings or ld.error],
        )


def _planted_code_ran(name: str, ev: Evidence) -> Verdict | None:
    """FAIL when loading ran the command a hostile pickle planted in the checkpoint (its marker exists)."""
    ran = [c for c in ev.corruptions if c.get("marker") and os.path.exists(c["marker"])]
    if ran:  # read from disk: only the command planted in the checkpoint creates its marker
        with open(ran[0]["marker"], "rb") as f:
            times = f.read(1 << 16).count(b"\n")  # one line each time the planted command ran
        return Verdict(
            name,
            FAIL,
            f"loading ran code planted in the checkpoint ({ran[0].get('rel')}): "
            f"{ran[0]['marker']} was created ({times} run{'s' if times != 1 else ''})",
            ran,
        )
    return None


def _wrong_values(ld, ev: Evidence, hit: set, stamped: dict) -> dict | None:
    """What was wrong with a load that returned after the corruption: values no save of its iteration
    wrote, a stamp no save wrote, or a wrong RNG state; None when it got what was saved."""
    saved = {s.fingerprint for s in ev.saved(ld.iteration)}
    if ld.fingerprint not in saved:
        return {
            "load_job": ld.job,
            "iteration": ld.iteration,
            "path": ld.path,
            "expected": sorted(saved, key=str),
            "found": ld.fingerprint,
            "corruption": ev.corruptions,
            "problem": "damaged checkpoint loaded as wrong values",
        }
    elif ld.iteration in hit and foreign_generations(ld, stamped):
        return {
            "load_job": ld.job,
            "iteration": ld.iteration,
            "path": ld.path,
            "found_generations": (ld.generations or {}).get("found"),
            "corruption": ev.corruptions,
            "problem": "damaged checkpoint loaded as wrong values: a stamp tensor holds a value no save wrote",
        }
    elif _wrong_rng(ld, ev.saved(ld.iteration)):
        return {
            "load_job": ld.job,
            "iteration": ld.iteration,
            "path": ld.path,
            "found_rng": ld.rng,
            "corruption": ev.corruptions,
            "problem": "damaged checkpoint restored a wrong RNG state",
        }
    return None


def _wrong_rng(ld, saves) -> bool:
    """The load restored an RNG state that no save of its iteration wrote (judged on the save's topology only:
    elsewhere the RNG is not expected back)."""
    same = [s.rng for s in saves if s.rng and s.topology == ld.topology]
    return bool(ld.rng_restored and ld.rng and same and ld.rng not in same)
