"""Progress where stderr is not a terminal (a CI log, output sent to a file): one plain line every tenth
of the cases or every few seconds, with the counts so far and the case running; a phase with no known end
(shrinking) counts without a total."""

from __future__ import annotations

import io

from resilience.commands.progress import Progress
from resilience.report.result_row import ResultRow


class Clock:
    def __init__(self):
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def _lines(stream: io.StringIO) -> list[str]:
    return [line for line in stream.getvalue().splitlines() if line.startswith("progress: ")]


def test_a_line_every_tenth_of_the_cases_with_the_counts_so_far():
    stream, clock = io.StringIO(), Clock()
    with Progress(20, "cases", stream=stream, clock=clock) as bar:
        for i, verdict in enumerate(["PASS", "FAIL", "PASS", "UNPROBED"]):
            bar.start(f"GLOBAL/torch_dist/sync kill-{i}")
            clock.now += 1.0
            bar.row(ResultRow("", "", verdict))  # a row that names no case
    assert _lines(stream) == [
        "progress: 2/20 cases · 1 failed (FAIL 1, PASS 1) · 2 s · last: GLOBAL/torch_dist/sync kill-1 FAIL",
        "progress: 4/20 cases · 2 failed (FAIL 1, PASS 2, UNPROBED 1) · 4 s · last: GLOBAL/torch_dist/sync kill-3 "
        "UNPROBED",
    ]


def test_a_line_after_a_few_seconds_however_few_cases_finished():
    stream, clock = io.StringIO(), Clock()
    with Progress(1000, "cases", stream=stream, clock=clock, every_seconds=10.0) as bar:
        bar.update(1, "PASS")
        assert _lines(stream) == []
        clock.now += 10.5
        bar.update(1, "PASS")
    assert _lines(stream) == ["progress: 2/1000 cases · 0 failed (PASS 2) · 10 s · last: PASS"]


def test_shrinking_is_a_phase_of_its_own_not_a_count_past_the_total():
    stream, clock = io.StringIO(), Clock()
    with Progress(2, "cases", stream=stream, clock=clock, every=1) as bar:
        bar.update(1, "PASS")
        bar.update(1, "FAIL")
        bar.phase("scenarios: shrinking")
        for _ in range(3):
            bar.update(1, "FAIL")
    lines = _lines(stream)
    assert lines[:2] == [
        "progress: 1/2 cases · 0 failed (PASS 1) · 0 s · last: PASS",
        "progress: 2/2 cases · 1 failed (FAIL 1, PASS 1) · 0 s · last: FAIL",
    ]
    assert lines[-1] == "progress: scenarios: shrinking · 5 cases · 4 failed (FAIL 4, PASS 1) · 0 s · last: FAIL"
    assert not any("/2 cases" in line for line in lines[2:])


def test_a_flaky_case_is_counted_among_the_failed():
    stream, clock = io.StringIO(), Clock()
    with Progress(2, "cases", stream=stream, clock=clock, every=2) as bar:
        for verdict in ("FLAKY", "PASS"):
            bar.row(ResultRow("save", "LEGACY/torch/sync", verdict, column="save"))
    assert _lines(stream) == [
        "progress: 2/2 cases · 1 failed (FLAKY 1, PASS 1) · 0 s · last: LEGACY/torch/sync save PASS",
    ]
