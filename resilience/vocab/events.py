"""The words of the Hypothesis events a judged case gives: one per fault kind its scenario drew, then its
verdict (or that the example was rejected). The fuzzer and the pytest plugin send them to Hypothesis and
the fuzzer keeps them on each case's row; the report counts faults drawn per kind and per verdict from
those same strings."""

from __future__ import annotations

FAULT = "fault: "
VERDICT = "verdict: "
REJECTED = "rejected: nothing to damage"  # a generated corruption found no file to hit: not run
NO_SAVE = "not run: no save to judge"  # a state-machine run whose rules saved nothing: no case


def events_of(faults: list[str], verdict: str | None) -> list[str]:
    """The events of one case: each fault kind drawn, then its verdict (None: the example was rejected)."""
    return [FAULT + kind for kind in faults] + [VERDICT + str(verdict) if verdict is not None else REJECTED]


def kinds_of(events: list[str]) -> list[str]:
    """The fault kinds named by a case's events."""
    return [e[len(FAULT) :] for e in events if e.startswith(FAULT)]


__all__ = ["FAULT", "NO_SAVE", "REJECTED", "VERDICT", "events_of", "kinds_of"]
