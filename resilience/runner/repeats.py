"""A case run several times with the same seed (--repeat N): each run in a folder of its own under the
case's, and one row for them all. Runs that agree keep their verdict (the first run's row, saying that N
runs agreed); runs whose verdicts differ are FLAKY, a failing verdict: behaviour that depends on timing is
a finding. The row lists every run's verdict and the folder of its evidence (ResultRow.repeats)."""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import replace

from ..report.matrix_table import is_framework_error
from ..report.result_row import Repetition, ResultRow, outcomes
from ..verdicts import FLAKY, SEVERITY

MAX_REPEAT = 100  # runs of one case: enough to catch a rare race, not a typo's worth of hours


def repetition_dir(case_dir: str, run: int) -> str:
    """The folder of run `run` (1-based) of a case whose folder is `case_dir`."""
    return os.path.join(case_dir, f"repeat-{run}")


def repeated_row(rows: Sequence[ResultRow]) -> tuple[int, ResultRow]:
    """The one row of a case's runs (in run order), and the index of the run it stands on: the first run
    when they agree; when they differ, a FLAKY row on the first run of the most severe verdict (its
    checkers and evidence, its folder); a framework error's own row when the framework broke on a run
    (its verdicts say nothing of timing). One run: that run's row, unchanged."""
    if len(rows) == 1:
        return 0, rows[0]
    runs = tuple(Repetition(k + 1, r.verdict, r.detail, r.case_dir, r.seconds) for k, r in enumerate(rows))
    seconds = sum(r.seconds for r in rows)
    said = f"{len(rows)} runs with the same seed"
    broke = next((k for k, r in enumerate(rows) if is_framework_error(r)), None)
    if broke is not None:
        detail = f"{rows[broke].detail}; the framework broke on run {broke + 1} of {said}: {outcomes(runs)}"
        return broke, _row(rows[broke], runs, seconds, detail=detail)
    if len({r.verdict for r in rows}) == 1:
        detail = f"{rows[0].detail} ({said} agreed)" if rows[0].detail else f"{said} agreed"
        return 0, _row(rows[0], runs, seconds, detail=detail)
    k = max(range(len(rows)), key=lambda i: (SEVERITY[rows[i].verdict], -i))
    worst = rows[k]
    detail = f"{said} gave different verdicts: {outcomes(runs)}; {worst.verdict} on run {k + 1}: {worst.detail}"
    return k, _row(rows[k], runs, seconds, detail=detail, verdict=FLAKY)


def _row(base: ResultRow, runs: tuple[Repetition, ...], seconds: float, **changes) -> ResultRow:
    """`base` standing for all the runs: their outcomes, their time, and a replay that repeats them."""
    replay = f"{base.replay} --repeat {len(runs)}" if base.replay else ""
    return replace(base, repeats=runs, seconds=seconds, replay=replay, **changes)
