"""Checkers read the evidence of a run (history + what loads returned) and give a verdict with evidence.
A checker that crashes gives UNKNOWN, never PASS."""

from __future__ import annotations

import traceback
from dataclasses import dataclass, field
from typing import Protocol

from ..verdicts import FAIL, FAILING, NA, PASS, REFUSED, SEVERITY, UNKNOWN, UNPROBED, WARN, Status, is_failing, worst
from .evidence import Evidence


@dataclass
class Verdict:
    checker: str
    status: Status
    detail: str = ""
    evidence: list[dict] = field(default_factory=list)

    def __post_init__(self):
        self.status = Status(self.status)

    def to_dict(self) -> dict:
        return {"checker": self.checker, "status": self.status.value, "detail": self.detail, "evidence": self.evidence}


class Checker(Protocol):
    name: str

    def check(self, ev: Evidence) -> Verdict: ...


def run_checker(checker: Checker, ev: Evidence) -> Verdict:
    try:
        v = checker.check(ev)
        if not isinstance(v, Verdict):
            return Verdict(checker.name, UNKNOWN, f"checker returned {type(v).__name__}, not a Verdict")
        return v
    except Exception as e:
        return Verdict(
            checker.name, UNKNOWN, f"checker crashed: {type(e).__name__}: {e}", [{"traceback": traceback.format_exc()}]
        )


__all__ = [
    "FAIL",
    "FAILING",
    "NA",
    "PASS",
    "REFUSED",
    "SEVERITY",
    "UNKNOWN",
    "UNPROBED",
    "WARN",
    "Checker",
    "Status",
    "Verdict",
    "is_failing",
    "run_checker",
    "worst",
]
