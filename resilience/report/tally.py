"""Counting and grouping a run's rows: the count line (each verdict, framework errors apart from UNKNOWN),
its chips' labels and colours, and the sections of the report by who is to blame (the implementation, an
unfired fault, the framework)."""

from __future__ import annotations

from dataclasses import dataclass

from ..verdicts import FAIL, FLAKY, NA, PASS, REFUSED, UNKNOWN, UNPROBED, WARN, is_failing
from .matrix_table import is_framework_error
from .result_row import ResultRow


@dataclass(frozen=True)
class Category:
    key: str
    title: str
    blurb: str


FAILED = Category(
    "failed",
    "Failures of the implementation",
    "FAIL: a checker found a broken guarantee. FLAKY: runs of the case with the same seed gave different "
    "verdicts, so its behaviour depends on timing (each run's verdict and folder are listed). UNKNOWN: the "
    "case could not be judged (a rank failed unexpectedly, a checker crashed).",
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
    ("FLAKY", "flaky"),
    ("UNKNOWN", "unknown"),
    ("framework error", "error"),
    ("UNPROBED", "unprobed"),
    ("N/A", "na"),
)
COUNT_LABEL = {REFUSED: "REFUSED"}
CSS = {
    PASS: "pass",
    WARN: "warn",
    REFUSED: "refused",
    FAIL: "fail",
    FLAKY: "flaky",
    UNKNOWN: "unknown",
    UNPROBED: "unprobed",
    NA: "na",
}


def count_label(label: str, n: int) -> str:
    """A count's label as its chip shows it: verdicts as they are, words in the plural past one."""
    return label + "s" if n != 1 and label in ("framework error", "minimal failure") else label


def category_of(row: ResultRow) -> Category | None:
    """The section a row goes in; None for a row that passed, was refused as expected or had nothing to judge."""
    if is_framework_error(row):
        return FRAMEWORK_ERRORS
    if row.verdict == UNPROBED:
        return NOT_PROBED
    return FAILED if is_failing(row.verdict) else None


def counts(rows: list[ResultRow]) -> list[tuple[str, int, str]]:
    """(label, number, css class) of each verdict the rows hold, in the order of COUNTED."""
    n = {label: 0 for label, _ in COUNTED}
    for r in rows:
        label = "framework error" if is_framework_error(r) else COUNT_LABEL.get(r.verdict, str(r.verdict))
        n[label] = n.get(label, 0) + 1
    return [(label, n[label], css) for label, css in COUNTED if n[label]]
