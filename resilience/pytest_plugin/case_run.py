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

    current = options.current
    if current is not None:  # a test function's case: named by its test, and xfail when the test is
        test, expected_failure = test or current.test, expected_failure or current.expected_failure
    extra = {"test": test, **({"expected_failure": expected_failure} if expected_failure else {})}
    try:
        resolved = options.resolved(backend)
    except ConfigError:  # judged as a case, as any command judges a backend it cannot make
        resolved = backend
    judged = judge_case(CaseSpec(scenario, combo, case_dir, resolved, extra=extra, io=options.io))
    options.session.append(judged.row)
    if judged.error is not None:  # the framework broke: one paragraph, the traceback in the case folder
        trace = judged.row.detail.rsplit("(traceback: ", 1)[-1].rstrip(")")
        raise FrameworkBroke(framework_paragraph(judged.error, where, case_dir, trace)) from None
    return judged.result


def xfail_reason(item) -> str:
    """Why the item is expected to fail (its xfail marker's reason, or "xfail"), "" when it is not."""
    marker = item.get_closest_marker("xfail")
    if marker is None:
        return ""
    return str(marker.kwargs.get("reason") or (marker.args[1] if len(marker.args) > 1 else "") or "xfail")
