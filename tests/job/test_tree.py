"""How long a hang's report waits for the stacks a job asked for (job.tree): until its output has grown
and gone quiet, not a fixed pause after the first line."""

from __future__ import annotations

import time

from resilience.job import tree


def _output(bursts: list[tuple[float, int]]):
    """output_lines() of a run that prints `lines` more at each of `bursts`' times (seconds from now)."""
    start = time.monotonic()

    def lines() -> int:
        now = time.monotonic() - start
        return sum(n for at, n in bursts if at <= now)

    return lines


def test_the_wait_lasts_until_the_dumps_go_quiet(monkeypatch):
    monkeypatch.setattr(tree, "STACKS_QUIET", 0.3)
    lines = _output([(0.1, 3), (0.35, 4), (0.6, 5)])  # two processes' dumps, late and in pieces
    tree._wait_for_dumps(lines, 0)
    assert lines() == 12  # the last burst came 0.5 s after the first: a fixed 0.2 s pause missed it


def test_a_job_that_prints_nothing_is_waited_for_until_stacks_wait_and_no_longer(monkeypatch):
    monkeypatch.setattr(tree, "STACKS_WAIT", 0.4)
    asked = []
    tree._wait_for_dumps(lambda: asked.append(1) or 0, 0)  # returns: the report goes on without stacks
    assert len(asked) > 1  # kept looking for them until then
