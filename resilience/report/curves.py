"""The loss curves of a `resilience job` run, drawn in report.html: for each case, the golden run (never
stopped) against every run of the case (the first, with its fault, and each restart; after a power loss,
each crash state's restarts), as an inline SVG the page needs no script for.

Read from the case's case.json (its `golden_curve` and each run's reported points); a file that is missing,
too large or not of that shape gives no chart, never an error. Values that are not finite are left out of
the line (a NaN loss is a gap)."""

from __future__ import annotations

import json
import math
import os
from dataclasses import dataclass

from .result_row import ResultRow

CASE_FILE = "case.json"
MAX_BYTES = 8 << 20  # a case.json larger than this is not read for a chart
MAX_SERIES = 9  # the golden curve and up to eight runs
WIDTH, HEIGHT, PAD = 560, 220, 44


@dataclass(frozen=True)
class Series:
    name: str
    css: str
    points: str  # SVG polyline points, "x,y x,y ..."
    count: int


@dataclass(frozen=True)
class Tick:
    at: float
    label: str


@dataclass(frozen=True)
class CurveChart:
    number: int  # the case's number in the report
    anchor: str
    title: str
    series: list[Series]
    xticks: list[Tick]
    yticks: list[Tick]
    width: int = WIDTH
    height: int = HEIGHT
    pad: int = PAD


def charts(rows: list[ResultRow]) -> list[CurveChart]:
    """A chart for each row of a job run whose case folder holds a golden curve and runs."""
    out = []
    for i, row in enumerate(rows):
        chart = chart_of(i + 1, row)
        if chart is not None:
            out.append(chart)
    return out


def chart_of(number: int, row: ResultRow) -> CurveChart | None:
    doc = _read(row.case_dir)
    if doc is None:
        return None
    golden = _curve(doc.get("golden_curve"))
    if not golden:
        return None
    lines: list[tuple[str, dict[int, float]]] = [("golden", golden)]
    for run in doc.get("runs") or ():
        lines.append((f"run {run.get('index', '?')}", _points(run)))
    for st in ((doc.get("power_loss") or {}).get("states") or ())[:3]:
        for run in (st.get("runs") or ())[1:]:
            lines.append((f"state {st.get('state', '?')} run {run.get('index', '?')}", _points(run)))
    lines = [(name, pts) for name, pts in lines if pts][:MAX_SERIES]
    steps = [s for _, pts in lines for s in pts]
    losses = [v for _, pts in lines for v in pts.values()]
    x0, x1 = min(steps), max(steps)
    y0, y1 = min(losses), max(losses)
    if x1 == x0:
        x1 = x0 + 1
    if y1 == y0:
        y0, y1 = y0 - 0.5, y1 + 0.5

    def x(step: float) -> float:
        return PAD + (step - x0) / (x1 - x0) * (WIDTH - 2 * PAD)

    def y(loss: float) -> float:
        return HEIGHT - PAD + (y0 - loss) / (y1 - y0) * (HEIGHT - 2 * PAD)

    series = [
        Series(
            name,
            "golden" if k == 0 else f"run-{(k - 1) % 8}",
            " ".join(f"{x(s):.1f},{y(v):.1f}" for s, v in sorted(pts.items())),
            len(pts),
        )
        for k, (name, pts) in enumerate(lines)
    ]
    xticks = [Tick(x(s), str(s)) for s in sorted({x0, (x0 + x1) // 2, x1})]
    yticks = [Tick(y(v), f"{v:.4g}") for v in (y0, (y0 + y1) / 2, y1)]
    title = f"{row.column or row.fault or row.scenario}: {row.verdict}"
    return CurveChart(number, f"curve-{number}", title, series, xticks, yticks)


def _read(case_dir: str | None) -> dict | None:
    path = os.path.join(case_dir, CASE_FILE) if case_dir else None
    try:
        if path is None or os.path.getsize(path) > MAX_BYTES:
            return None
        with open(path, encoding="utf-8") as f:
            doc = json.load(f)
    except (OSError, ValueError):
        return None
    return doc if isinstance(doc, dict) else None


def _curve(raw) -> dict[int, float]:
    out: dict[int, float] = {}
    if isinstance(raw, dict):
        for k, v in raw.items():
            step, loss = _int(k), _float(v)
            if step is not None and loss is not None:
                out[step] = loss
    return out


def _points(run) -> dict[int, float]:
    out: dict[int, float] = {}
    points = ((run or {}).get("observed") or {}).get("points") if isinstance(run, dict) else None
    for p in points or ():
        if isinstance(p, dict):
            step, loss = _int(p.get("step")), _float(p.get("loss"))
            if step is not None and loss is not None:
                out.setdefault(step, loss)
    return out


def _int(v) -> int | None:
    try:
        return int(v)
    except (TypeError, ValueError):
        return None


def _float(v) -> float | None:
    try:
        f = float(v)
    except (TypeError, ValueError):
        return None
    return f if math.isfinite(f) else None


__all__ = ["CurveChart", "chart_of", "charts"]
