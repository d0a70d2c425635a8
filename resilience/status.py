"""Verdicts: the closed set every checker, command, report and summary speaks, and the one set of them
that counts as not passed. No dependencies, so anything may import it (the pytest plugin included)."""
from __future__ import annotations

from enum import Enum


class Status(str, Enum):
    """A verdict. A str, so rows read back from JSON compare equal to it."""

    PASS = "PASS"
    FAIL = "FAIL"
    UNKNOWN = "UNKNOWN"          # could not be judged: a crashed checker, a rank that failed unexpectedly
    REFUSED = "REFUSED-AS-EXPECTED"
    NA = "N/A"                   # nothing to judge, and nothing was supposed to be probed
    UNPROBED = "UNPROBED"        # a configured fault never fired or applied: nothing was tested

    __str__ = str.__str__
    __format__ = str.__format__  # type: ignore[assignment]  # format as the plain string, like __str__

    @property
    def failing(self) -> bool:
        return self in FAILING


PASS, FAIL, UNKNOWN, REFUSED, NA, UNPROBED = (Status.PASS, Status.FAIL, Status.UNKNOWN, Status.REFUSED, Status.NA,
                                              Status.UNPROBED)
# What no command may count as passed: every summary, exit status and report uses this one set.
FAILING = frozenset({FAIL, UNKNOWN, UNPROBED})
SEVERITY = {FAIL: 5, UNKNOWN: 4, UNPROBED: 3, REFUSED: 1, PASS: 1, NA: 0}


def is_failing(status) -> bool:
    """Whether a verdict (a Status or its string, as results.json holds it) counts as not passed."""
    return status in FAILING


def worst(statuses) -> Status:
    """The verdict that sums up several: the most severe."""
    statuses = [Status(s) for s in statuses] or [NA]
    return max(statuses, key=lambda s: SEVERITY[s])
