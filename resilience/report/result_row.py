"""One case's result row: what results.jsonl and results.json hold, what junit.xml, report.md and
report.html show, what the fuzzer and the cluster validation write. Turned into JSON and back in one
place (to_dict, from_dict); docs/results.md is its schema."""

from __future__ import annotations

from dataclasses import dataclass, fields, replace
from typing import Any

from ..checkers import Verdict
from ..errors import ConfigError
from ..verdicts import SEVERITY, Status

# 2: rows carry "schema"; a row without it was written before (version 1, the same fields otherwise)
# 3: a case run more than once (--repeat) carries "repeats", each run's outcome; versions 1 and 2 never do
ROW_SCHEMA = 3
READABLE_SCHEMAS = (1, 2, 3)


@dataclass(frozen=True)
class FaultResult:
    """What became of one configured fault of the case: fired, never fired, not applicable or not in
    this backend (runner.fault_outcomes), and why."""

    fault: str
    status: str
    detail: str = ""

    def to_dict(self) -> dict:
        return {"fault": self.fault, "status": self.status, "detail": self.detail}

    @classmethod
    def from_dict(cls, d: dict) -> FaultResult:
        return cls(str(d.get("fault", "")), str(d.get("status", "")), str(d.get("detail", "")))


@dataclass(frozen=True)
class Repetition:
    """One run of a case run several times with the same seed (--repeat): its verdict, why, and the
    folder of its evidence."""

    run: int  # 1-based
    verdict: Status
    detail: str = ""
    case_dir: str | None = None
    seconds: float = 0.0

    def __post_init__(self):
        object.__setattr__(self, "verdict", Status(self.verdict))
        object.__setattr__(self, "seconds", round(float(self.seconds), 3))

    def to_dict(self) -> dict:
        return {
            "run": self.run,
            "verdict": self.verdict.value,
            "detail": self.detail,
            "case_dir": self.case_dir,
            "seconds": self.seconds,
        }

    @classmethod
    def from_dict(cls, d: dict) -> Repetition:
        return cls(
            int(d.get("run") or 0),
            d.get("verdict", "N/A"),
            str(d.get("detail") or ""),
            d.get("case_dir") if isinstance(d.get("case_dir"), str) else None,
            float(d.get("seconds") or 0.0),
        )


def outcomes(repeats) -> str:
    """The distinct verdicts of a case's runs with their counts, the most severe first: '2 PASS, 1 FAIL'."""
    counts: dict[Status, int] = {}
    for r in repeats:
        counts[r.verdict] = counts.get(r.verdict, 0) + 1
    return ", ".join(f"{n} {v}" for v, n in sorted(counts.items(), key=lambda vn: -SEVERITY[vn[0]]))


def runs_text(row) -> list[str]:
    """One line per run of a repeated case ('run 2: FAIL in cases/003/repeat-2: durability: ...'), for the
    summaries and JUnit; none for a case run once."""
    return [f"run {r.run}: {r.verdict} in {r.case_dir}: {r.detail[:200]}" for r in row.repeats or ()]


def culprits_text(row, limit: int = 10) -> list[str]:
    """One line per operation a failing checker named as destroying or mixing acknowledged data ('culprit:
    retention: unlink step-2/... by rank 0 (pid 812, main thread) ...'), for the summaries and JUnit."""
    out: list[str] = []
    for v in row.checkers:
        for item in v.evidence or ():
            for c in (item.get("culprits") or [item]) if isinstance(item, dict) else ():
                said = c.get("culprit") if isinstance(c, dict) else None
                if isinstance(said, str) and f"culprit: {v.checker}: {said}" not in out:
                    out.append(f"culprit: {v.checker}: {said}")
    return out[:limit]


# written only when set: the keys a row of one kind of run has and the others do not
_OPTIONAL = (
    "column",
    "options",
    "broken",
    "test",
    "expected_failure",
    "scenario_file",
    "minimal",
    "events",
    "phase",
)


@dataclass(frozen=True)
class ResultRow:
    """One case's result (docs/results.md names each field)."""

    scenario: str
    combo: str
    verdict: Status
    detail: str = ""
    seconds: float = 0.0
    checkers: tuple[Verdict, ...] = ()  # each checker's verdict and evidence, in the order they judged
    faults: tuple[FaultResult, ...] = ()
    fault: str | None = None  # the matrix column's fault, or the fuzzer's mode
    transition: str | None = None
    case_dir: str | None = None
    replay: str = ""
    column: str | None = None  # the table column, when it is not the fault, transition or scenario
    options: str | None = None  # an option sweep's option set
    broken: str | None = None  # the broken implementation the case ran (resilience broken)
    test: str | None = None  # the pytest test that ran the case
    expected_failure: str | None = None  # why that test is expected to fail (its xfail reason)
    scenario_file: str | None = None  # the fuzzer's kept scenario of the case
    minimal: bool = False  # a fuzzer's minimal failure, not a case it ran
    events: tuple[str, ...] | None = None  # what the fuzzer told Hypothesis (fault kinds drawn, verdict)
    phase: str | None = None  # the fuzzer's phase: searching or shrinking
    repeats: tuple[Repetition, ...] | None = None  # each run of a case run more than once (--repeat N)

    def __post_init__(self):
        object.__setattr__(self, "verdict", Status(self.verdict))
        object.__setattr__(self, "seconds", round(float(self.seconds), 3))  # as every row has been written

    def with_extra(self, **extra: Any) -> ResultRow:
        """The row with the fields a run adds (column, broken, test, ...)."""
        return replace(self, **extra)

    @property
    def outcomes(self) -> str:
        """Its runs' verdicts with their counts ('2 PASS, 1 FAIL'); "" for a case run once."""
        return outcomes(self.repeats) if self.repeats else ""

    def to_dict(self) -> dict:
        """The row as results.jsonl and results.json hold it."""
        d: dict[str, Any] = {
            "schema": ROW_SCHEMA,
            "scenario": self.scenario,
            "combo": self.combo,
            "fault": self.fault,
            "transition": self.transition,
            "verdict": self.verdict.value,
            "detail": self.detail,
            "seconds": round(self.seconds, 3),
            "checkers": [v.to_dict() for v in self.checkers],
            "faults": [f.to_dict() for f in self.faults],
            "case_dir": self.case_dir,
            "replay": self.replay,
        }
        for name in _OPTIONAL:
            value = getattr(self, name)
            if value not in (None, False):
                d[name] = list(value) if name == "events" else value
        if self.repeats:  # written only when set, as the keys above
            d["repeats"] = [r.to_dict() for r in self.repeats]
        return d

    @classmethod
    def from_dict(cls, d: dict) -> ResultRow:
        """A row as results.jsonl or results.json holds it, of any readable schema; a ConfigError for a
        row of a newer schema, or one without a verdict or combination."""
        schema = d.get("schema", 1)
        if schema not in READABLE_SCHEMAS:
            raise ConfigError(
                "results", f"a row of schema {schema!r}: this version reads {READABLE_SCHEMAS}", "upgrade resilience"
            )
        if "verdict" not in d or "combo" not in d:
            raise ConfigError("results", "a row without a verdict or a combination", "")
        known = {f.name for f in fields(cls)}
        kept = {k: v for k, v in d.items() if k in known}
        kept["checkers"] = tuple(verdict_from_dict(v) for v in d.get("checkers") or [] if isinstance(v, dict))
        kept["faults"] = tuple(FaultResult.from_dict(f) for f in d.get("faults") or [] if isinstance(f, dict))
        if isinstance(d.get("events"), list):
            kept["events"] = tuple(str(e) for e in d["events"])
        else:
            kept.pop("events", None)
        if isinstance(d.get("repeats"), list):
            kept["repeats"] = tuple(Repetition.from_dict(r) for r in d["repeats"] if isinstance(r, dict)) or None
        else:
            kept.pop("repeats", None)
        kept["scenario"] = str(d.get("scenario", ""))
        kept["seconds"] = float(d.get("seconds") or 0.0)
        kept["detail"] = str(d.get("detail") or "")
        kept["replay"] = str(d.get("replay") or "")
        kept["minimal"] = bool(d.get("minimal"))
        return cls(**kept)


def verdict_from_dict(d: dict) -> Verdict:
    """A checker's verdict as a row holds it (Verdict.to_dict), read back."""
    return Verdict(str(d.get("checker", "")), d.get("status", "N/A"), str(d.get("detail", "")), d.get("evidence") or [])


def rows_to_json(rows: list[ResultRow]) -> list[dict]:
    """results.json: the rows as one list."""
    return [r.to_dict() for r in rows]


def rows_from_json(doc: Any) -> list[ResultRow]:
    """The rows of a results.json (a list of rows, of any readable schema); a ConfigError otherwise."""
    if not isinstance(doc, list):
        raise ConfigError("results", "results.json does not hold a list of rows", "")
    return [ResultRow.from_dict(r) for r in doc if isinstance(r, dict)]
