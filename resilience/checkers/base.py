"""Checkers read the evidence of a run (history + what loads returned) and give a verdict with evidence.
A checker that crashes gives UNKNOWN, never PASS."""
from __future__ import annotations

import traceback
from dataclasses import dataclass, field
from typing import Callable, Protocol

from ..checkpoint.combos import Combination
from ..state import Topology

PASS, FAIL, UNKNOWN, REFUSED, NA, UNPROBED = "PASS", "FAIL", "UNKNOWN", "REFUSED-AS-EXPECTED", "N/A", "UNPROBED"
SEVERITY = {FAIL: 5, UNKNOWN: 4, UNPROBED: 3, REFUSED: 1, PASS: 1, NA: 0}


@dataclass
class Verdict:
    checker: str
    status: str
    detail: str = ""
    evidence: list[dict] = field(default_factory=list)

    def to_dict(self) -> dict:
        return {"checker": self.checker, "status": self.status, "detail": self.detail, "evidence": self.evidence}


@dataclass
class SaveRecord:
    job: int
    iteration: int
    topology: str
    fingerprint: str | None
    rng: str | None
    status: str  # ok (committed and reported done) / fail / info (outcome unknown: cut by a crash)
    index: int   # order in the history


@dataclass
class LoadRecord:
    job: int
    topology: str
    status: str  # ok / fail
    index: int
    iteration: int | None = None
    fingerprint: str | None = None
    rng: str | None = None
    rng_restored: bool = False
    warnings: list[str] = field(default_factory=list)
    error: str = ""
    refused: bool = False
    path: str = ""
    crash_state: str | None = None  # set when loaded from a materialised power-loss state
    continued: list[tuple[int, str]] = field(default_factory=list)  # (iteration, fingerprint) after training on


@dataclass
class Evidence:
    """Everything checkers look at for one scenario x combination."""

    combo: Combination
    save_topology: Topology
    saves: list[SaveRecord]
    loads: list[LoadRecord]
    corruptions: list[dict]          # {"index", "iteration", "detail", ...}
    crashes: list[dict]              # {"job", "index", "ranks", "how"}
    lost_unsynced: list[dict]        # {"index", "states"}
    expected: Callable[[int], str]   # fingerprint of training that never stopped, at an iteration
    faults_configured: list[dict] = field(default_factory=list)
    faults_fired: list[dict] = field(default_factory=list)
    expect: dict = field(default_factory=dict)

    def saved(self, iteration: int) -> list[SaveRecord]:
        return [s for s in self.saves if s.iteration == iteration]

    def acknowledged_before(self, index: int) -> list[SaveRecord]:
        return [s for s in self.saves if s.status == "ok" and s.index < index]

    def corrupted_before(self, index: int) -> list[dict]:
        return [c for c in self.corruptions if c["index"] < index]


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
        return Verdict(checker.name, UNKNOWN, f"checker crashed: {type(e).__name__}: {e}",
                       [{"traceback": traceback.format_exc()}])


def worst(statuses) -> str:
    statuses = list(statuses) or [NA]
    return max(statuses, key=lambda s: SEVERITY.get(s, 4))
