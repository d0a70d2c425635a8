"""What report.md and report.html say, computed once from the rows: verdict counts, the matrix with a
link from each cell, every case that did not pass with its evidence written out, grouped by who is to
blame (the implementation, an unfired fault, the framework), and links to each case's files.

The parts: counting and grouping (tally.py), one case (case_view.py), a fuzzing run's modes
(fuzz_view.py), a cluster validation (cluster_view.py), the links relative to the run folder (links.py)."""

from __future__ import annotations

from dataclasses import dataclass, field, replace

from ..verdicts import NA, REFUSED, WARN, summary_line
from .case_view import CaseView, case_view
from .cluster_view import ClusterView, cluster_of
from .curves import CurveChart, charts
from .fuzz_view import FuzzMode, fuzz_modes
from .matrix_table import column_of, matrix, row_of, short, status_of
from .result_row import ResultRow
from .tally import CSS, NOT_PROBED, SECTIONS, Category, counts


@dataclass(frozen=True)
class Cell:
    text: str
    css: str
    href: str | None
    cases: int


@dataclass
class RunView:
    title: str
    note: str
    facts: list[tuple[str, str]]
    total: int
    summary: str  # status.summary_line of the cases run, as every command prints it
    counts: list[tuple[str, int, str]]
    columns: list[tuple[str, str]]  # (name, transition or "")
    grid: list[tuple[str, list[Cell]]]
    sections: list[tuple[Category, list[CaseView]]]
    refused: list[CaseView]
    warned: list[CaseView] = field(default_factory=list)  # passed, with a finding worth a look
    cases: list[CaseView] = field(default_factory=list)
    fuzz: list[FuzzMode] = field(default_factory=list)
    minimal: int = 0  # minimal failures a fuzzing run kept (rows of their own, not cases run)
    on_the_way: int = 0  # failing cases a fuzzing run met while searching and shrinking, left to the table
    cluster: ClusterView | None = None  # a cluster validation: nodes, attempts, restarts, kills, each load
    curves: list[CurveChart] = field(default_factory=list)  # a job run: each case's runs against the golden curve
    # the corners table, transposed: (corner, what it probes, one cell per combination of `grid`)
    corners: list[tuple[str, str, list[Cell]]] = field(default_factory=list)

    @property
    def headline(self) -> str:
        """What a reader needs first, in words: the summary line every command prints, and what it does not
        tell apart: UNKNOWN cases the framework broke on, a fuzzing run's minimal failures."""
        n = dict((label, n) for label, n, _ in self.counts)
        extra = []
        if n.get("framework error"):  # counted among the UNKNOWN by the summary line: said which they are
            fw, unknown = n["framework error"], n["framework error"] + n.get("UNKNOWN", 0)
            are = "is a framework error" if fw == 1 else "are framework errors"
            extra.append(f"{fw} of the {unknown} UNKNOWN {are}")
        xfail = sum(bool(c.expected_failure) and c.category is not None for c in self.cases)
        if xfail:  # a pytest session's tests marked xfail: failing as expected
            failing = sum(c.category is not None for c in self.cases)
            are = "is expected to fail" if xfail == 1 else "are expected to fail"
            extra.append(f"{xfail} of the {failing} not passed {are} (their tests are marked xfail)")
        if self.fuzz:
            extra.append(f"{self.minimal} minimal failure{'s' if self.minimal != 1 else ''} kept")
        return self.summary + "".join(f"; {e}" for e in extra)


def build(rows: list[ResultRow], meta: dict, columns: list[str] | None = None, run_dir: str | None = None) -> RunView:
    """The view of a run folder's rows; `run_dir` (the folder the report is written into) for the links."""
    cases = [case_view(i, r, run_dir) for i, r in enumerate(rows)]
    # a fuzzing run's minimal failures are rows of their own: counted apart from the cases it ran, and they
    # stand for the failing cases met while searching and shrinking, which only the table of cases lists
    runs = [r for r in rows if not r.minimal]
    minimal = len(rows) - len(runs)
    listed = {
        c.number
        for r, c in zip(rows, cases)
        if c.category is not None and (r.minimal or not minimal or c.category is NOT_PROBED)
    }
    cases = [replace(c, listed=c.number in listed) for c in cases]
    shown = [c for c in cases if c.listed]
    combos, cols, cells = matrix(rows, columns)
    by_cell: dict[tuple[str, str], list[CaseView]] = {}
    for r, c in zip(rows, cases):
        by_cell.setdefault((row_of(r), c.column), []).append(c)
    probes = dict(meta.get("corners") or {})  # corner column -> its one line (matrix runs with corners)

    def cell(combo: str, col: str) -> Cell:
        return _cell(cells.get((combo, col), NA.value), by_cell.get((combo, col), []))

    corners = [(col, str(probes[col] or ""), [cell(combo, col) for combo in combos]) for col in cols if col in probes]
    cols = [c for c in cols if c not in probes]
    grid = [(combo, [cell(combo, col) for col in cols]) for combo in combos]
    transitions = {column_of(r): r.transition for r in rows if r.transition}
    counted = counts(runs) + ([("minimal failure", minimal, "fail")] if minimal else [])
    return RunView(
        title=str(meta.get("title", "Resilience run")),
        note=str(meta.get("note") or ""),
        facts=_facts(meta, runs),
        total=len(runs),
        summary=summary_line(r.verdict for r in runs),
        counts=counted,
        columns=[(c, transitions.get(c, "")) for c in cols],
        grid=grid,
        sections=[(cat, [c for c in shown if c.category is cat]) for cat in SECTIONS],
        refused=[c for c in cases if c.verdict == REFUSED],
        warned=[c for c in cases if c.verdict == WARN],
        cases=cases,
        fuzz=fuzz_modes(meta, runs),
        minimal=minimal,
        on_the_way=sum(c.category is not None and c.number not in listed for c in cases),
        cluster=cluster_of(meta.get("cluster"), run_dir),
        curves=charts(rows),
        corners=corners,
    )


def _facts(meta: dict, rows: list[ResultRow]) -> list[tuple[str, str]]:
    facts = [("seed", str(meta["seed"]))] if meta.get("seed") is not None else []
    if meta.get("backend", "reference") is not None:  # a job run (resilience job) names its command instead
        facts.append(("backend", str(meta.get("backend", "reference"))))
    if meta.get("io"):
        facts.append(("faults through", str(meta["io"])))
    planned = meta.get("cases")
    facts.append(("cases", f"{len(rows)} of {planned}" if planned and planned != len(rows) else str(len(rows))))
    if meta.get("kind") == "fuzz":
        info = meta.get("fuzz") or {}
        facts.append(("examples", f"{info.get('examples', '?')} per mode"))
        facts.append(("rejected", f"{info.get('rejected', 0)} (generated, but nothing to damage: not run)"))
    if (meta.get("repeat") or 1) > 1:
        facts.append(("runs per case", f"{meta['repeat']}, with the same seed"))
    facts.append(("time in cases", f"{sum(r.seconds for r in rows):.1f} s"))
    if meta.get("started"):
        facts.append(("started", str(meta["started"])))
    facts.append(("command", str(meta.get("command", ""))))
    return facts


def _cell(cell: str, cases: list[CaseView]) -> Cell:
    """A matrix cell links to the case that gave its verdict: to it in the page when it is written out there,
    to its section when it is not (a fuzzing run writes out the minimal failure standing for it), else to
    the case's folder."""
    css = "error" if short(cell) == "ERROR" else CSS.get(status_of(cell), "na")
    worst = next((c for c in cases if c.label == short(cell)), cases[0] if cases else None)
    if worst is None:
        return Cell(short(cell), css, None, 0)
    href = "#" + worst.category.key if worst.category is not None and not worst.listed else worst.href
    return Cell(short(cell), css, href, len(cases))
