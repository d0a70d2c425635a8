"""One case as the reports show it: its verdict and cell label, the section it goes in, each checker's
finding with its evidence written out (within limits), its faults and the links to its files."""

from __future__ import annotations

import json
from dataclasses import dataclass

from ..checkers import Verdict
from ..checkers.case import DETAIL_LIMIT
from ..verdicts import NA, PASS, REFUSED, Status
from .fuzz_view import kinds_drawn
from .links import Link, case_links, local_path, scenario_file_text
from .matrix_table import cell_of, column_of, is_framework_error, row_of, short
from .result_row import FaultResult, ResultRow
from .tally import CSS, Category, category_of

MAX_EVIDENCE = 5  # evidence items written out per checker; the rest are counted, and are in results.json
MAX_VALUE = 3000  # characters of one evidence value


@dataclass(frozen=True)
class Finding:
    """One checker's verdict that was not a pass, with its evidence as (key, text) pairs per item."""

    checker: str
    status: str
    detail: str
    evidence: list[list[tuple[str, str]]]
    more: int  # items not written out


@dataclass(frozen=True)
class RunOutcome:
    """One run of a case run several times with the same seed: its verdict, why, and its folder."""

    run: int
    verdict: str
    css: str
    detail: str
    href: str | None  # its folder, relative to the run folder


@dataclass(frozen=True)
class CaseView:
    number: int
    anchor: str
    combo: str
    column: str
    scenario: str
    verdict: str
    label: str  # as a matrix cell shows it
    css: str
    category: Category | None
    detail: str
    seconds: float
    replay: str
    findings: list[Finding]
    faults: list[FaultResult]
    links: list[Link]
    scenario_text: str = ""  # a fuzzing run's minimal failing scenario, written out
    listed: bool = False  # written out in a section of the report (its anchor exists)
    phase: str = ""  # a fuzzing run's case: searching or shrinking
    drawn: tuple[str, ...] = ()  # a fuzzing run's case: the fault kinds it drew
    test: str = ""  # a pytest session's case: the test that ran it
    expected_failure: str = ""  # ... and why that test is expected to fail (xfail), when it is
    runs: tuple[RunOutcome, ...] = ()  # a case run several times (--repeat): each run's outcome
    outcomes: str = ""  # ... their verdicts with counts: '2 PASS, 1 FAIL'

    @property
    def detail_repeats(self) -> bool:
        """Whether the row's detail only repeats its findings ("durability: 1 of 1 loads lost ...; faults: ..."),
        each written out below it anyway."""
        if not self.findings:
            return False
        rest = self.detail
        saids = [f"{f.checker}: {f.detail}" for f in self.findings]
        for f, said in zip(self.findings, saids):
            rest = rest.replace(said if said in rest else f.detail, "", 1)  # a framework error's: the detail alone
        if not rest.replace(";", "").strip():
            return True
        # a row's detail is cut at DETAIL_LIMIT characters: what is left may be the start of a finding
        tail = rest.strip("; ")
        return len(self.detail) >= DETAIL_LIMIT and any(s.startswith(tail) for s in saids)

    @property
    def href(self) -> str | None:
        """Where a link to the case goes: its section in the page when it is written out, else its folder."""
        return "#" + self.anchor if self.listed else self.folder

    @property
    def folder(self) -> str | None:
        return next((link.href for link in self.links if link.label in ("case folder", "scenario")), None)


def case_view(i: int, row: ResultRow, run_dir: str | None) -> CaseView:
    """The view of the i-th row (0-based); `run_dir` (the folder the report is written into) for the links."""
    verdict = str(row.verdict)
    category = category_of(row)
    findings = (
        [_finding(v) for v in row.checkers if v.status not in (PASS, NA, REFUSED)] if category is not None else []
    )
    return CaseView(
        number=i + 1,
        anchor=f"case-{i + 1}",
        combo=row_of(row),
        column=column_of(row),
        scenario=row.scenario,
        verdict=verdict,
        label=short(cell_of(row)),
        css="error" if is_framework_error(row) else CSS.get(Status(verdict), "na"),
        category=category,
        detail=row.detail,
        seconds=row.seconds,
        replay=row.replay,
        findings=findings,
        faults=list(row.faults),
        links=case_links(run_dir, row) if run_dir else [],
        scenario_text=scenario_file_text(run_dir, row) if row.minimal and run_dir else "",
        phase=row.phase or "",
        drawn=tuple(kinds_drawn(row)[0]),
        test=row.test or "",
        expected_failure=row.expected_failure or "",
        runs=_runs(row, run_dir),
        outcomes=row.outcomes,
    )


def _runs(row: ResultRow, run_dir: str | None) -> tuple[RunOutcome, ...]:
    def href(case_dir) -> str | None:
        rel = local_path(run_dir, case_dir) if run_dir else None
        return rel + "/" if rel else None

    return tuple(
        RunOutcome(r.run, str(r.verdict), CSS.get(r.verdict, "na"), r.detail, href(r.case_dir))
        for r in row.repeats or ()
    )


def _finding(v: Verdict) -> Finding:
    items = v.evidence or []
    return Finding(
        v.checker or "?",
        str(v.status),
        v.detail,
        [_pairs(e) for e in items[:MAX_EVIDENCE]],
        max(0, len(items) - MAX_EVIDENCE),
    )


def _pairs(item) -> list[tuple[str, str]]:
    """An evidence item as (key, text) pairs: strings as they are (tracebacks keep their lines), the rest as JSON."""
    if not isinstance(item, dict):
        return [("", _text(item))]
    return [(str(k), _text(v)) for k, v in item.items()]


def _text(value) -> str:
    """One evidence value as text: a string as it is; a mapping of strings (errors by rank) one "key: value" a
    line, so each keeps its own lines; anything else as JSON, indented once it no longer fits a line."""
    if isinstance(value, str):
        text = value
    elif isinstance(value, list) and value and all(isinstance(c, dict) and c.get("culprit") for c in value):
        text = "\n".join(str(c["culprit"]) for c in value)  # culprits: who destroyed what, a line each
    elif isinstance(value, dict) and value and all(isinstance(v, str) for v in value.values()):
        text = "\n".join(f"{k}: {v}" for k, v in value.items())
    else:
        text = json.dumps(value, default=str)
        if len(text) > 160:
            text = json.dumps(value, default=str, indent=1)
    return text if len(text) <= MAX_VALUE else text[:MAX_VALUE] + f" ... ({len(text) - MAX_VALUE} more characters)"
