"""What a fuzzing run's report says of each mode: the cases it ran (searching, then shrinking), their
verdicts, the fault kinds drawn and how often each fired, and where the mode's time went."""

from __future__ import annotations

from dataclasses import dataclass

from ..vocab.events import FAULT, NO_SAVE, REJECTED, kinds_of
from .matrix_table import column_of
from .result_row import ResultRow
from .tally import counts

NO_FAULT = "no fault"  # the row of the fuzz report's faults table for cases that drew none


@dataclass(frozen=True)
class FaultDrawn:
    """One fault kind a fuzzing mode drew (its Hypothesis events): in how many cases run, in how many of
    them it fired, their verdicts, and the examples drawing it that were rejected (not run)."""

    kind: str  # "no fault" for the cases that drew none
    cases: int
    fired: int
    verdicts: list[tuple[str, int, str]]
    rejected: int = 0


@dataclass(frozen=True)
class FuzzMode:
    """One mode of a fuzzing run: the cases it ran (searching, then shrinking), their verdicts, the faults
    drawn, and where its time went (running cases on ranks; the rest generating examples)."""

    mode: str
    cases: int
    counts: list[tuple[str, int, str]]
    seconds: float
    shrinking: float
    stopped: str
    faults: list[FaultDrawn]
    searching_cases: int = 0
    shrinking_cases: int = 0
    running: float = 0.0  # seconds inside cases, both phases
    running_shrinking: float = 0.0
    rejected: int = 0
    no_save: int = 0  # state-machine runs that saved nothing: no case to run
    hypothesis: str = ""  # Hypothesis' own statistics in one line, when it delivered them

    @property
    def generating(self) -> float:
        """Seconds not spent running cases: Hypothesis drawing examples, and the run folder being written."""
        return max(0.0, self.seconds - self.running)

    @property
    def accounted(self) -> bool:
        """Whether the phases add up to the cases run (rows without a phase are from an older run)."""
        return self.searching_cases + self.shrinking_cases == self.cases

    @property
    def accounting(self) -> str:
        """One sentence that adds up the mode's examples: the cases run (searching and shrinking), the examples
        rejected and the state-machine runs that saved nothing (neither ran a case)."""
        phases = f" ({self.searching_cases} searching + {self.shrinking_cases} shrinking)" if self.accounted else ""
        out = f"{self.mode}: {_n(self.cases, 'case')} run{phases}"
        if self.rejected:
            out += f", {_n(self.rejected, 'example')} rejected (generated, nothing to damage: not run)"
        if self.no_save:
            out += f", {_n(self.no_save, 'example')} that saved nothing (no case to judge)"
        return out + "."


def _n(n: int, word: str) -> str:
    return f"{n} {word}{'s' if n != 1 else ''}"


def fuzz_modes(meta: dict, runs: list[ResultRow]) -> list[FuzzMode]:
    """Each mode of a fuzzing run (meta["kind"] == "fuzz"), from its rows and the timings in meta; [] otherwise."""
    if meta.get("kind") != "fuzz":
        return []
    info = meta.get("fuzz") or {}
    timings, stopped = info.get("timings") or {}, meta.get("stopped") or {}
    events, stats = info.get("events") or {}, info.get("hypothesis") or {}
    modes = list(info.get("modes") or dict.fromkeys(column_of(r) for r in runs))
    out = []
    for m in modes:
        rows = [r for r in runs if column_of(r) == m]
        t = timings.get(m) or {}
        running = t.get("running") or {}
        mode_events = events.get(m) or {}
        out.append(
            FuzzMode(
                m,
                len(rows),
                counts(rows),
                float(t.get("seconds", 0.0)),
                float(t.get("shrinking", 0.0)),
                str(stopped.get(m, "")),
                _faults_drawn(rows, mode_events),
                searching_cases=sum(r.phase == "searching" for r in rows),
                shrinking_cases=sum(r.phase == "shrinking" for r in rows),
                running=float(sum(running.values())),
                running_shrinking=float(running.get("shrinking", 0.0)),
                rejected=int(mode_events.get(REJECTED, 0)),
                no_save=int(mode_events.get(NO_SAVE, 0)),
                hypothesis=_hypothesis_line(stats.get(m)),
            )
        )
    return out


def kinds_drawn(row: ResultRow) -> tuple[list[str], dict[str, bool]]:
    """The fault kinds a case drew, from its Hypothesis events (a row of an older run: from its faults, whose
    text starts with the kind), and whether each fired."""
    fired: dict[str, bool] = {}
    for f in row.faults:
        if f.fault:
            kind = f.fault.split()[0]
            fired[kind] = fired.get(kind, False) or f.status == "fired"
    kinds = kinds_of(list(row.events)) if row.events is not None else list(fired)
    return kinds, fired


def _faults_drawn(rows: list[ResultRow], events: dict) -> list[FaultDrawn]:
    """Each fault kind the cases drew, most drawn first, then "no fault" for the cases that drew none: in how
    many cases, in how many of those it fired, their verdicts; and the rejected examples that drew it."""
    drawn: dict[str, list[ResultRow]] = {}
    fired: dict[str, int] = {}
    for r in rows:
        kinds, fired_here = kinds_drawn(r)
        for kind in kinds or [NO_FAULT]:
            drawn.setdefault(kind, []).append(r)
            fired[kind] = fired.get(kind, 0) + bool(fired_here.get(kind))
    # the mode's events count every example, rejected ones too: a kind's events less the cases run that drew
    # it are the rejected examples that drew it
    rejected = {
        e[len(FAULT) :]: int(n) - len(drawn.get(e[len(FAULT) :], []))
        for e, n in events.items()
        if e.startswith(FAULT) and int(n) > len(drawn.get(e[len(FAULT) :], []))
    }
    for kind in rejected:
        drawn.setdefault(kind, [])
    order = sorted(drawn, key=lambda k: (k == NO_FAULT, -len(drawn[k]), k))
    return [
        FaultDrawn(k, len(drawn[k]), fired.get(k, 0), counts(drawn[k]), rejected.get(k, 0))
        for k in order
        if k != NO_FAULT or drawn[k]
    ]


def _hypothesis_line(stats: dict | None) -> str:
    """Hypothesis' own count of the mode, per phase: test cases by status, seconds, of them drawing data."""
    if not stats or not stats.get("phases"):
        return ""
    parts = []
    for phase, p in stats["phases"].items():
        statuses = ", ".join(f"{n} {s}" for s, n in sorted((p.get("statuses") or {}).items()))
        parts.append(
            f"{phase} phase: {p.get('test_cases', 0)} test cases ({statuses}) in {float(p.get('seconds', 0)):.1f} s, "
            f"{float(p.get('drawing', 0)):.2f} s of them drawing data"
        )
    why = stats.get("stopped_because")
    return "; ".join(parts) + (f"; stopped because {why}" if why else "")
