"""What a test that runs scenarios through `resilience_run` gets beyond the verdicts: a time budget and a
shrink budget for property tests, framework errors kept apart from implementation failures, Hypothesis
events naming the faults drawn, and the verdict, replay and evidence as JUnit properties.

A budget stops Hypothesis from inside an example by raising a BaseException (as `resilience fuzz` does):
Hypothesis neither counts it as a failure nor shrinks it. The plugin's pytest_pyfunc_call wrapper catches
it and ends the test: passed when nothing failed, else with the smallest failure found so far."""

from __future__ import annotations

import time
from dataclasses import dataclass, field


# not an Exception: Hypothesis would take it for a failing example and shrink it, instead of stopping
class BudgetSpent(BaseException):
    """The test's time budget (or, once something failed, its shrink budget) is spent."""


# not an Exception: Hypothesis would shrink it as a bug of the implementation; it ends the test at once
class FrameworkBroke(BaseException):
    """The framework, not the implementation under test, failed on a case: never shrunk as a bug of the
    implementation; the test fails with one short paragraph naming the case folder."""

    def __init__(self, message: str):
        super().__init__(message)


@dataclass
class TestRun:
    """The cases one test item ran through resilience_run, and its budgets (seconds; None: no limit)."""

    time_budget: float | None
    shrink_budget: float | None
    start: float = field(default_factory=time.monotonic)
    cases: int = 0
    statuses: list = field(default_factory=list)
    first_failure: float | None = None
    failing: set = field(default_factory=set)  # keys of examples that failed: always replayed
    last_failure: BaseException | None = None  # the newest failure (Hypothesis replays the minimal last)
    last: dict = field(default_factory=dict)  # verdict, replay, evidence of the case to show in JUnit
    stopped: str = ""
    test: str = ""  # the test item's node id
    expected_failure: str = ""  # why it is marked xfail, when it is: its cases' rows say so
    faults: dict = field(default_factory=dict)  # fault drawn -> how many cases had it
    combos: dict = field(default_factory=dict)  # combination -> its case to show in JUnit (a failing one first)
    gaps: int = 0  # UNPROBED cases that did not fail the test (a property test's examples that tested nothing)

    def may_run(self, key: str) -> str:
        """'' when the example may run, else the budget it would exceed."""
        if key in self.failing:
            return ""
        now = time.monotonic()
        if self.first_failure is not None:
            ok = self.shrink_budget is None or now - self.first_failure < self.shrink_budget
            return "" if ok else "shrink budget"
        return "" if self.time_budget is None or now - self.start < self.time_budget else "time budget"

    def record(self, key: str, result, replay: str, failed: BaseException | None, faults: list[str]) -> None:
        self.cases += 1
        for fault in set(faults):
            self.faults[fault] = self.faults.get(fault, 0) + 1
        self.statuses.append(result.verdict)
        if failed is not None or not self.last or self.last.get("verdict") not in ("FAIL", "UNKNOWN"):
            self.last = {"verdict": str(result.verdict), "replay": replay, "evidence": result.case_dir}
        shown = self.combos.get(str(result.combo))
        if failed is not None or shown is None or not shown[1]:
            line = f"{result.verdict}: {str(result.detail)[:200]}; replay: {replay}; evidence: {result.case_dir}"
            self.combos[str(result.combo)] = (line, failed is not None)
        if failed is None and result.verdict == "UNPROBED":
            self.gaps += 1
        if failed is not None:
            self.failing.add(key)
            self.last_failure = failed
            if self.first_failure is None:
                self.first_failure = time.monotonic()

    def properties(self) -> list[tuple[str, str]]:
        """JUnit properties: how many cases, their summary, the verdict, replay and evidence of the failing
        case (else the last), and one entry per combination run (`resilience_case[COMBO]`: its failing
        case, else its last: verdict, detail, replay, evidence)."""
        if not self.cases:
            return []
        from ..verdicts import summary_line

        props = [("resilience_cases", str(self.cases)), ("resilience_summary", summary_line(self.statuses))]
        props += [(k, v) for k, v in self.last.items() if v]
        props += [(f"resilience_case[{combo}]", line) for combo, (line, _) in self.combos.items()]
        if self.gaps:
            props.append(("resilience_gaps", f"{self.gaps} UNPROBED cases tested nothing (not shrunk)"))
        if self.faults:
            props.append(("resilience_faults", ", ".join(f"{k} x{n}" for k, n in sorted(self.faults.items()))))
        if self.stopped:
            props.append(("resilience_stopped", self.stopped))
        return props


def in_property_test() -> bool:
    """Whether the caller runs inside a Hypothesis example."""
    try:
        from hypothesis import currently_in_test_context
    except ImportError:  # an older Hypothesis
        return False
    return bool(currently_in_test_context())


def framework_paragraph(error: BaseException, where: str, case_dir: str, trace: str) -> str:
    """One short paragraph: the framework, not the implementation, failed on this case."""
    return (
        f"framework error (not a defect of the implementation under test) in {where}: "
        f"{type(error).__name__}: {str(error)[:400]}\n  evidence: {case_dir}\n  traceback: {trace}\n"
        "  please report it with the case folder"
    )
