"""Verdicts: the closed set every checker, command, report and summary speaks, and the one set of them
that counts as not passed. No dependencies, so anything may import it (the pytest plugin included)."""

from __future__ import annotations

from enum import Enum


class Status(str, Enum):
    """A verdict. A str, so rows read back from JSON compare equal to it."""

    PASS = "PASS"
    WARN = "WARN"  # passed, with a finding worth a look (an error that does not name the damaged file)
    FAIL = "FAIL"
    UNKNOWN = "UNKNOWN"  # could not be judged: a crashed checker, a rank that failed unexpectedly
    REFUSED = "REFUSED-AS-EXPECTED"
    NA = "N/A"  # nothing to judge, and nothing was supposed to be probed
    UNPROBED = "UNPROBED"  # a configured fault never fired or applied: nothing was tested
    FLAKY = "FLAKY"  # runs of the case with the same seed gave different verdicts: timing-dependent behaviour

    __str__ = str.__str__
    __format__ = str.__format__  # type: ignore[assignment]  # format as the plain string, like __str__

    @property
    def failing(self) -> bool:
        return self in FAILING


PASS, WARN, FAIL, UNKNOWN, REFUSED, NA, UNPROBED, FLAKY = (
    Status.PASS,
    Status.WARN,
    Status.FAIL,
    Status.UNKNOWN,
    Status.REFUSED,
    Status.NA,
    Status.UNPROBED,
    Status.FLAKY,
)
# What no command may count as passed: every summary, exit status and report uses this one set.
FAILING = frozenset({FAIL, UNKNOWN, UNPROBED, FLAKY})
# FLAKY just under FAIL: some run of it failed, so it is a finding about the implementation (above UNKNOWN,
# which judged nothing), but a case that fails every time is the surer one to show where both meet
SEVERITY = {FAIL: 6, FLAKY: 5, UNKNOWN: 4, UNPROBED: 3, WARN: 2, REFUSED: 1, PASS: 1, NA: 0}


def is_failing(status) -> bool:
    """Whether a verdict (a Status or its string, as results.json holds it) counts as not passed."""
    return status in FAILING


def worst(statuses) -> Status:
    """The verdict that sums up several: the most severe."""
    statuses = [Status(s) for s in statuses] or [NA]
    return max(statuses, key=lambda s: SEVERITY[s])


# What a summary counts as passed. N/A is neither: nothing was judged, so it is counted on its own. A WARN
# passed: the guarantee held, and the finding beside it is counted apart so it is not lost among passes.
PASSED = frozenset({PASS, REFUSED, WARN})


def summary_line(statuses) -> str:
    """The one summary line every command prints for its verdicts (Status values or their strings):
    '6 passed (1 WARN), 1 N/A, 5 not passed (3 FAIL, 2 UNPROBED)'. PASS, REFUSED-AS-EXPECTED and WARN are passed;
    every FAILING verdict (UNKNOWN and UNPROBED too) is not passed, which is also what makes the exit
    status 1 (`is_failing`)."""
    counts: dict[Status, int] = {}
    for s in statuses:
        status = Status(s)
        counts[status] = counts.get(status, 0) + 1
    passed = sum(n for s, n in counts.items() if s in PASSED)
    bad = {s: n for s, n in counts.items() if s in FAILING}
    parts = [f"{passed} passed" + (f" ({counts[WARN]} {WARN})" if counts.get(WARN) else "")]
    if counts.get(NA):
        parts.append(f"{counts[NA]} N/A")
    text = f"{sum(bad.values())} not passed"
    if bad:
        text += " (" + ", ".join(f"{bad[s]} {s}" for s in sorted(bad, key=lambda s: -SEVERITY[s])) + ")"
    return ", ".join(parts + [text])
