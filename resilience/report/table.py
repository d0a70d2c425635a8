"""The matrix view of rows: one line per combination, one column per fault or transition."""
from __future__ import annotations

from ..checkers import worst

SHORT = {"PASS": "PASS", "FAIL": "FAIL", "UNKNOWN": "UNKNOWN", "REFUSED-AS-EXPECTED": "REFUSED", "N/A": "-",
         "UNPROBED": "UNPROBED"}


def column_of(row: dict) -> str:
    if row.get("transition"):
        return row.get("column") or row["transition"]
    return row.get("column") or row.get("fault") or row.get("scenario", "?")


def matrix(rows: list[dict], columns: list[str] | None = None) -> tuple[list[str], list[str], dict]:
    """(combos in order, columns in order, {(combo, column): verdict})."""
    combos, cols, cells = [], list(columns or []), {}
    for r in rows:
        col = column_of(r)
        if r["combo"] not in combos:
            combos.append(r["combo"])
        if col not in cols:
            cols.append(col)
        key = (r["combo"], col)
        cells[key] = worst([cells[key], r["verdict"]]) if key in cells else r["verdict"]
    return combos, cols, cells


def text_table(rows: list[dict], columns: list[str] | None = None) -> str:
    combos, cols, cells = matrix(rows, columns)
    width = max([len(c) for c in combos] + [11])
    widths = [max(len(c), 8) for c in cols]
    lines = ["combination".ljust(width) + "  " + "  ".join(c.ljust(w) for c, w in zip(cols, widths))]
    for combo in combos:
        lines.append(combo.ljust(width) + "  " + "  ".join(
            SHORT.get(cells.get((combo, c), "N/A"), cells.get((combo, c), "-")).ljust(w) for c, w in zip(cols, widths)))
    return "\n".join(lines)
