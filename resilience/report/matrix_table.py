"""The matrix view of rows: one line per combination, one column per fault or transition."""

from __future__ import annotations

from ..verdicts import FAIL, FLAKY, NA, PASS, REFUSED, UNKNOWN, UNPROBED, WARN, Status, worst
from .result_row import ResultRow

SHORT: dict[str, str] = {
    PASS: "PASS",
    WARN: "WARN",
    FAIL: "FAIL",
    UNKNOWN: "UNKNOWN",
    REFUSED: "REFUSED",
    NA: "-",
    UNPROBED: "UNPROBED",
    FLAKY: "FLAKY",
}
ALSO_UNPROBED = "+" + UNPROBED.value  # a FAIL or UNKNOWN beside a configured fault that never fired: both shown
# The checker name of a row the framework could not judge (the runner raised, not the implementation):
# its own category in every report, apart from the implementation's failures
FRAMEWORK = "framework"
FRAMEWORK_CELL = UNKNOWN.value + "+ERROR"
FRAMEWORK_ERROR = "framework-error.txt"  # the traceback, in the case folder


def is_framework_error(row: ResultRow) -> bool:
    """Whether the row is UNKNOWN because the framework broke on the case (runner.case_loop.framework_error_row)."""
    return row.verdict == UNKNOWN and any(v.checker == FRAMEWORK for v in row.checkers)


def cell_of(row: ResultRow) -> str:
    """A row's verdict as a cell shows it: marked when one of its faults never fired, so nothing hides, and
    when the framework, not the implementation, broke on it."""
    verdict = row.verdict
    if is_framework_error(row):
        return FRAMEWORK_CELL
    if verdict in (FAIL, UNKNOWN) and any(f.status != "fired" for f in row.faults):
        return verdict.value + ALSO_UNPROBED
    return verdict.value


def status_of(cell: str) -> Status:
    return Status(cell.split("+")[0])


def short(cell: str) -> str:
    """'FAIL+UNPROBED' -> 'FAIL+UNPROBED', 'N/A' -> '-', 'REFUSED-AS-EXPECTED' -> 'REFUSED', a framework
    error -> 'ERROR'."""
    if cell == FRAMEWORK_CELL:
        return "ERROR"
    base, plus, rest = cell.partition("+")
    return SHORT.get(base, base) + plus + rest


def column_of(row: ResultRow) -> str:
    if row.transition:
        return row.column or row.transition
    return row.column or row.fault or row.scenario or "?"


def row_of(row: ResultRow) -> str:
    """The table row a result goes into: its combination, and in an option sweep its option set."""
    return f"{row.combo} [{row.options}]" if row.options else row.combo


def matrix(rows: list[ResultRow], columns: list[str] | None = None) -> tuple[list[str], list[str], dict]:
    """(rows in order, columns in order, {(row, column): cell}), a cell being cell_of() the worst row; a
    table row is a combination, or a (combination, option set) in an option sweep (row_of)."""
    combos: list[str] = []
    cols = list(columns or [])
    cells: dict[tuple[str, str], str] = {}
    for r in rows:
        col = column_of(r)
        if row_of(r) not in combos:
            combos.append(row_of(r))
        if col not in cols:
            cols.append(col)
        key = (row_of(r), col)
        cell = cell_of(r)
        if key in cells and status_of(cells[key]) != status_of(cell):
            cell = cells[key] if worst([status_of(cells[key]), status_of(cell)]) == status_of(cells[key]) else cell
        elif key in cells and "+" in cells[key]:
            cell = cells[key]
        cells[key] = cell
    return combos, cols, cells


def text_table(rows: list[ResultRow], columns: list[str] | None = None) -> str:
    combos, cols, cells = matrix(rows, columns)
    return "\n".join(_grid("combination", combos, cols, lambda combo, col: cells.get((combo, col), NA.value)))


def _grid(corner: str, lines: list[str], cols: list[str], cell) -> list[str]:
    """A text grid: `corner` above the line names, one line per name, one column per `cols`; each cell
    short(cell(line, col))."""
    width = max([len(x) for x in lines] + [len(corner)])
    widths = [max(len(c), 8) for c in cols]
    out = [corner.ljust(width) + "  " + "  ".join(c.ljust(w) for c, w in zip(cols, widths))]
    for line in lines:
        out.append(line.ljust(width) + "  " + "  ".join(short(cell(line, c)).ljust(w) for c, w in zip(cols, widths)))
    return out


def transposed_table(rows: list[ResultRow], columns: list[str], says: dict[str, str] | None = None) -> str:
    """One line per column (a corner), one column per combination; then what each line probes, one line
    each (`says`: column -> its sentence)."""
    combos, cols, cells = matrix(rows, columns)
    lines = _grid("corner", cols, combos, lambda col, combo: cells.get((combo, col), NA.value))
    told = [(c, says[c]) for c in cols if says and c in says]
    if told:
        lines += ["", "what each probes:"] + [f"  {c}: {s}" for c, s in told]
    return "\n".join(line.rstrip() for line in lines)
