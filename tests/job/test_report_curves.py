"""The loss curves of a job run in report.html, as Chromium renders them: the golden curve and every run of
each case, one line each, with as many points as the runs reported."""

import os

import pytest

from resilience.job.matrix import run_job
from resilience.report.browser import dump_dom
from tests.report.dom import parse

from .conftest import options, quick

pytestmark = pytest.mark.multiprocess


def test_each_case_draws_its_runs_against_the_golden_curve(tmp_path, quick_golden, browser):
    done = run_job(
        options(tmp_path, quick("--variant", "skip_data"), columns=("chained", "power-loss"), golden=quick_golden)
    )
    dom = parse(dump_dom(os.path.join(done.folder, "report.html")))
    figures = dom.find_all("figure", cls="curve")
    assert [f.attrs["data-case"] for f in figures] == ["1", "2"]
    chained = {p.attrs["data-series"]: int(p.attrs["data-points"]) for p in figures[0].find_all("polyline")}
    assert chained == {"golden": 12, "run 0": 6, "run 1": 6, "run 2": 4}, chained  # killed at 6, then at 10
    assert "FAIL" in figures[0].find("figcaption").text  # the data stream a step ahead after each resume
    power = [p.attrs["data-series"] for p in figures[1].find_all("polyline")]
    assert power[:2] == ["golden", "run 0"] and any(s.startswith("state 0 run 1") for s in power), power
    for p in figures[0].find_all("polyline"):
        xy = [tuple(map(float, pt.split(","))) for pt in p.attrs["points"].split()]
        assert len(xy) == int(p.attrs["data-points"]) and all(0 <= x <= 560 and 0 <= y <= 220 for x, y in xy)


def test_each_case_has_a_timeline_of_its_file_operations_with_the_faults_and_kills(tmp_path, quick_golden):
    done = run_job(options(tmp_path, quick(), columns=("slow-disk",), golden=quick_golden))
    [row] = done.rows
    page = open(os.path.join(row.case_dir, "timeline.html"), encoding="utf-8").read()
    assert "rank 1 · main" in page and "rename rank_1.bin.tmp -&gt; rank_1.bin" in page
    assert "slow: slow_write delay=1.0" in page  # each firing, on its rank's lane
    assert "whole job: between saves" in page and "run 1: exit 0" in page  # the runner's kill and each run
