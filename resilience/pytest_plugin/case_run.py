"""One case run through the plugin: judged as every command judges one (runner.case_loop.judge_case), its
row appended to the session's run folder, named by the test that ran it (xfail when that test is)."""

from __future__ import annotations

from ..errors import ConfigError
from .budget import FrameworkBroke, framework_paragraph
from .options import ResilienceOptions


def run_case(
    options: ResilienceOptions,
    scenario,
    combo,
    case_dir: str,
    backend: str,
    where: str,
    *,
    test: str = "",
    expected_failure: str = "",
):
    """The case judged as every command judges one (runner.case_loop.judge_case), its row in the
    session's run folder; a framework error raises FrameworkBroke."""
    __tracebackhide__ = True
    from ..runner.case_loop import CaseSpec, judge_case
    from ..runner.repeats import repeated_row, repetition_dir

    current = options.current
    if current is not None:  # a test function's case: named by its test, and xfail when the test is
        test, expected_failure = test or current.test, expected_failure or current.expected_failure
    extra = {"test": test, **({"expected_failure": expected_failure} if expected_failure else {})}
    try:
        resolved = options.resolved(backend)
    except ConfigError:  # judged as a case, as any command judges a backend it cannot make
        resolved = backend
    scenario = options.placed(scenario)
    runs = []  # --resilience-repeat: each run of the case in its own folder, one row for them all
    for k in range(options.repeat):
        where_run = case_dir if options.repeat == 1 else repetition_dir(case_dir, k + 1)
        runs.append(judge_case(CaseSpec(scenario, combo, where_run, resolved, extra=extra, io=options.io)))
    k, row = repeated_row([j.row for j in runs])
    judged = runs[k]
    options.session.append(row)
    if judged.error is not None:  # the framework broke: one paragraph, the traceback in the case folder
        trace = judged.row.detail.rsplit("(traceback: ", 1)[-1].rstrip(")")
        raise FrameworkBroke(framework_paragraph(judged.error, where, judged.row.case_dir or case_dir, trace)) from None
    return _as_result(judged.result, row)


def _as_result(result, row):
    """The run's CaseResult standing for all the runs of a repeated case: the row's verdict, why (with a
    line for each run and its folder, so a failing test names the evidence of every run), its replay and
    its evidence; a case run once, its own."""
    if not row.repeats:
        return result
    from dataclasses import replace

    from ..report.result_row import runs_text

    detail = "\n".join([row.detail, *(f"  {line}" for line in runs_text(row))])
    return replace(result, verdict=row.verdict, detail=detail, replay=row.replay, seconds=row.seconds)


def xfail_reason(item) -> str:
    """Why the item is expected to fail (its xfail marker's reason, or "xfail"), "" when it is not."""
    marker = item.get_closest_marker("xfail")
    if marker is None:
        return ""
    return str(marker.kwargs.get("reason") or (marker.args[1] if len(marker.args) > 1 else "") or "xfail")
