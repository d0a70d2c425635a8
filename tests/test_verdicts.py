"""The one summary rule: which verdicts a command's summary line counts as passed."""

import pytest

from resilience.verdicts import FAILING, Status, is_failing, summary_line, worst


@pytest.mark.parametrize(
    "verdicts, line",
    [
        ([], "0 passed, 0 not passed"),
        (["PASS", "REFUSED-AS-EXPECTED"], "2 passed, 0 not passed"),
        (["PASS", "N/A"], "1 passed, 1 N/A, 0 not passed"),
        (["WARN", "PASS", "FAIL"], "2 passed (1 WARN), 1 not passed (1 FAIL)"),
        (["UNPROBED", "PASS"], "1 passed, 1 not passed (1 UNPROBED)"),
        (["UNKNOWN", "FAIL", "UNPROBED", "FAIL"], "0 passed, 4 not passed (2 FAIL, 1 UNKNOWN, 1 UNPROBED)"),
        (["FLAKY", "PASS", "UNKNOWN", "FAIL"], "1 passed, 3 not passed (1 FAIL, 1 FLAKY, 1 UNKNOWN)"),
    ],
)
def test_summary_line(verdicts, line):
    assert summary_line(verdicts) == line


def test_never_passed_is_what_fails_the_exit_status():
    for status in Status:
        said_passed = summary_line([status]).startswith("1 passed")
        assert said_passed == (not is_failing(status) and status != Status.NA)
    assert {Status.UNKNOWN, Status.UNPROBED, Status.FLAKY} <= FAILING


def test_a_flaky_case_sums_up_under_a_fail_and_over_a_case_not_judged():
    """Some run of a FLAKY case failed: a finding about the implementation, above UNKNOWN (nothing judged);
    a case that fails on every run is the surer finding, so FAIL stays the worst."""
    assert worst([Status.FLAKY, Status.UNKNOWN, Status.UNPROBED, Status.PASS]) == Status.FLAKY
    assert worst([Status.FLAKY, Status.FAIL]) == Status.FAIL


def test_a_warning_sums_up_over_a_pass_and_under_every_failure():
    assert worst([Status.PASS, Status.WARN, Status.REFUSED]) == Status.WARN
    assert worst([Status.WARN, Status.UNPROBED]) == Status.UNPROBED


def test_a_string_that_is_no_verdict_is_an_error():
    with pytest.raises(ValueError):
        summary_line(["PASSED"])
