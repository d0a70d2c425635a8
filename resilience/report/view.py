"""What report.md and report.html say, computed once from the rows: verdict counts, the matrix with a
link from each cell, every case that did not pass with its evidence written out, grouped by who is to
blame (the implementation, an unfired fault, the framework), and links to each case's files.

Links are relative to the run folder, so a moved or copied folder keeps them; a row's paths are matched
to the folder by their tail when the folder moved since the run (results.json keeps the old paths)."""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field, replace
from urllib.parse import quote

from ..checkers import Verdict
from ..status import FAIL, NA, PASS, REFUSED, UNKNOWN, UNPROBED, WARN, Status, is_failing, summary_line
from ..vocab.events import FAULT, NO_SAVE, REJECTED, kinds_of
from .cluster_view import ClusterView, cluster_of
from .result_row import FaultResult, ResultRow
from .table import FRAMEWORK_ERROR, column_of, is_framework_error, matrix, row_of, short, status_of

TIMELINE = "timeline.html"  # written into each case folder by report.timeline
# (label, name inside the case folder; "" is the folder itself), linked when present
CASE_FILES = (
    ("case folder", ""),
    ("scenario", "scenario.yaml"),
    ("history", "history.jsonl"),
    ("logs", "logs"),
    ("faults fired", "faults.jsonl"),
    ("timeline", TIMELINE),
    ("traceback", FRAMEWORK_ERROR),
)
NO_FAULT = "no fault"  # the row of the fuzz report's faults table for cases that drew none
MAX_EVIDENCE = 5  # evidence items written out per checker; the rest are counted, and are in results.json
MAX_VALUE = 3000  # characters of one evidence value


@dataclass(frozen=True)
class Category:
    key: str
    title: str
    blurb: str


FAILED = Category(
    "failed",
    "Failures of the implementation",
    "FAIL: a checker found a broken guarantee. UNKNOWN: the case could not be judged (a rank failed "
    "unexpectedly, a checker crashed).",
)
NOT_PROBED = Category(
    "unprobed",
    "Not probed",
    "UNPROBED: a configured fault never fired, so nothing was tested. Not a pass.",
)
FRAMEWORK_ERRORS = Category(
    "framework",
    "Framework errors",
    "The framework broke on the case, not the implementation: a bug of this tool. The end of its traceback is "
    "written out; all of it is in the case folder.",
)
SECTIONS = (FAILED, NOT_PROBED, FRAMEWORK_ERRORS)
WARNED_BLURB = (
    "WARN: every guarantee held, and a checker found something worth a look (an error on a damaged file that "
    "does not name it). Counted as passed, listed here so it is not lost among the passes."
)

# The count line: (label, css class) in reading order; a framework error is counted apart from UNKNOWN
COUNTED = (
    ("PASS", "pass"),
    ("WARN", "warn"),
    ("REFUSED", "refused"),
    ("FAIL", "fail"),
    ("UNKNOWN", "unknown"),
    ("framework error", "error"),
    ("UNPROBED", "unprobed"),
    ("N/A", "na"),
)
COUNT_LABEL = {REFUSED: "REFUSED"}
CSS = {PASS: "pass", WARN: "warn", REFUSED: "refused", FAIL: "fail", UNKNOWN: "unknown", UNPROBED: "unprobed", NA: "na"}


@dataclass(frozen=True)
class Link:
    label: str
    href: str  # relative to the run folder, URL-quoted


@dataclass(frozen=True)
class Finding:
    """One checker's verdict that was not a pass, with its evidence as (key, text) pairs per item."""

    checker: str
    status: str
    detail: str
    evidence: list[list[tuple[str, str]]]
    more: int  # items not written out


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

    @property
    def detail_repeats(self) -> bool:
        """Whether the row's detail only repeats its findings ("durability: 1 of 1 loads lost ...; faults: ..."),
        each written out below it anyway."""
        if not self.findings:
            return False
        rest = self.detail
        for f in self.findings:
            said = f"{f.checker}: {f.detail}"
            rest = rest.replace(said if said in rest else f.detail, "", 1)  # a framework error's: the detail alone
        return not rest.replace(";", "").strip()

    @property
    def href(self) -> str | None:
        """Where a link to the case goes: its section in the page when it is written out, else its folder."""
        return "#" + self.anchor if self.listed else self.folder

    @property
    def folder(self) -> str | None:
        return next((link.href for link in self.links if link.label in ("case folder", "scenario")), None)


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


def count_label(label: str, n: int) -> str:
    """A count's label as its chip shows it: verdicts as they are, words in the plural past one."""
    return label + "s" if n != 1 and label in ("framework error", "minimal failure") else label


def _n(n: int, word: str) -> str:
    return f"{n} {word}{'s' if n != 1 else ''}"


def category_of(row: ResultRow) -> Category | None:
    """The section a row goes in; None for a row that passed, was refused as expected or had nothing to judge."""
    if is_framework_error(row):
        return FRAMEWORK_ERRORS
    if row.verdict == UNPROBED:
        return NOT_PROBED
    return FAILED if is_failing(row.verdict) else None


def build(rows: list[ResultRow], meta: dict, columns: list[str] | None = None, run_dir: str | None = None) -> RunView:
    """The view of a run folder's rows; `run_dir` (the folder the report is written into) for the links."""
    cases = [_case(i, r, run_dir) for i, r in enumerate(rows)]
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
    grid = [
        (combo, [_cell(cells.get((combo, col), NA.value), by_cell.get((combo, col), [])) for col in cols])
        for combo in combos
    ]
    transitions = {column_of(r): r.transition for r in rows if r.transition}
    counts = _counts(runs) + ([("minimal failure", minimal, "fail")] if minimal else [])
    return RunView(
        title=str(meta.get("title", "Resilience run")),
        note=str(meta.get("note") or ""),
        facts=_facts(meta, runs),
        total=len(runs),
        summary=summary_line(r.verdict for r in runs),
        counts=counts,
        columns=[(c, transitions.get(c, "")) for c in cols],
        grid=grid,
        sections=[(cat, [c for c in shown if c.category is cat]) for cat in SECTIONS],
        refused=[c for c in cases if c.verdict == REFUSED],
        warned=[c for c in cases if c.verdict == WARN],
        cases=cases,
        fuzz=_fuzz_modes(meta, runs),
        minimal=minimal,
        on_the_way=sum(c.category is not None and c.number not in listed for c in cases),
        cluster=cluster_of(meta.get("cluster"), run_dir),
    )


def _fuzz_modes(meta: dict, runs: list[ResultRow]) -> list[FuzzMode]:
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
                _counts(rows),
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


def _kinds(row: ResultRow) -> tuple[list[str], dict[str, bool]]:
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
        kinds, fired_here = _kinds(r)
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
        FaultDrawn(k, len(drawn[k]), fired.get(k, 0), _counts(drawn[k]), rejected.get(k, 0))
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


def _counts(rows: list[ResultRow]) -> list[tuple[str, int, str]]:
    n = {label: 0 for label, _ in COUNTED}
    for r in rows:
        label = "framework error" if is_framework_error(r) else COUNT_LABEL.get(r.verdict, str(r.verdict))
        n[label] = n.get(label, 0) + 1
    return [(label, n[label], css) for label, css in COUNTED if n[label]]


def _facts(meta: dict, rows: list[ResultRow]) -> list[tuple[str, str]]:
    facts = [("seed", str(meta["seed"]))] if meta.get("seed") is not None else []
    facts.append(("backend", str(meta.get("backend", "reference"))))
    if meta.get("io"):
        facts.append(("faults through", str(meta["io"])))
    planned = meta.get("cases")
    facts.append(("cases", f"{len(rows)} of {planned}" if planned and planned != len(rows) else str(len(rows))))
    if meta.get("kind") == "fuzz":
        info = meta.get("fuzz") or {}
        facts.append(("examples", f"{info.get('examples', '?')} per mode"))
        facts.append(("rejected", f"{info.get('rejected', 0)} (generated, but nothing to damage: not run)"))
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


def _case(i: int, row: ResultRow, run_dir: str | None) -> CaseView:
    from .table import cell_of

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
        scenario_text=_scenario_text(run_dir, row) if row.minimal and run_dir else "",
        phase=row.phase or "",
        drawn=tuple(_kinds(row)[0]),
        test=row.test or "",
        expected_failure=row.expected_failure or "",
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
    elif isinstance(value, dict) and value and all(isinstance(v, str) for v in value.values()):
        text = "\n".join(f"{k}: {v}" for k, v in value.items())
    else:
        text = json.dumps(value, default=str)
        if len(text) > 160:
            text = json.dumps(value, default=str, indent=1)
    return text if len(text) <= MAX_VALUE else text[:MAX_VALUE] + f" ... ({len(text) - MAX_VALUE} more characters)"


def case_links(run_dir: str, row: ResultRow) -> list[Link]:
    """Links to the case's folder and files that exist, relative to `run_dir`."""
    links = []
    case = local_path(run_dir, row.case_dir)
    if case is not None:
        for label, name in CASE_FILES:
            rel = f"{case}/{name}" if name else case
            if os.path.exists(os.path.join(run_dir, rel)):
                links.append(Link(label, _href(rel) + ("/" if os.path.isdir(os.path.join(run_dir, rel)) else "")))
    scenario = local_path(run_dir, row.scenario_file)
    if scenario is not None and not any(link.label == "scenario" for link in links):
        links.insert(0, Link("scenario", _href(scenario)))
    return links


def _scenario_text(run_dir: str, row: ResultRow, limit: int = 20_000) -> str:
    rel = local_path(run_dir, row.scenario_file)
    if rel is None:
        return ""
    with open(os.path.join(run_dir, rel), encoding="utf-8", errors="replace") as f:
        text = f.read(limit + 1)
    return text if len(text) <= limit else text[:limit] + "\n..."


def local_path(run_dir: str, path) -> str | None:
    """`path` as a path relative to `run_dir` ('/'-separated), if it is there; matched by its tail when the
    folder was moved since (a path recorded as /old/runs/x/cases/001 is found as cases/001)."""
    if not path or not isinstance(path, str):
        return None
    root = os.path.abspath(run_dir)
    full = os.path.abspath(path)
    if full.startswith(root + os.sep) and os.path.exists(full):
        return os.path.relpath(full, root).replace(os.sep, "/")
    parts = [p for p in os.path.normpath(path).split(os.sep) if p not in ("", ".", "..")]
    for i in range(len(parts)):  # the longest tail that exists under the folder
        rel = "/".join(parts[i:])
        if os.path.exists(os.path.join(root, *parts[i:])):
            return rel
    return None


def _href(rel: str) -> str:
    return quote(rel, safe="/")
