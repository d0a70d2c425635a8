"""The Hypothesis events a judged case gives (resilience.vocab.events): one per fault kind its scenario
drew, and its verdict. `resilience fuzz` and the pytest plugin both send them (`--hypothesis-show-statistics`
lists them), and the fuzzer keeps the same strings on each case's row for its report."""

from __future__ import annotations

from ..vocab.events import events_of


def faults_in(scenario) -> list[str]:
    """The kinds of the scenario's faults, as their records name them ('rank_crash', 'truncate'), in order,
    each once."""
    return list(dict.fromkeys(step.fault.kind for step in scenario.steps if step.fault is not None))


def tell_hypothesis(events: list[str]) -> None:
    """Send the events to the Hypothesis example running now (a no-op outside one)."""
    from hypothesis import currently_in_test_context, event

    if currently_in_test_context():
        for e in events:
            event(e)


__all__ = ["events_of", "faults_in", "tell_hypothesis"]
