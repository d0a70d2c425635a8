"""A case run several times with the same seed (--repeat): one row for its runs, FLAKY when their verdicts
differ, with every outcome and each run's folder, in results.json, report.md, report.html and junit.xml."""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET

from resilience.checkers import Verdict
from resilience.report import RunFolder
from resilience.report.matrix_table import FRAMEWORK, text_table
from resilience.report.result_row import READABLE_SCHEMAS, ROW_SCHEMA, Repetition, ResultRow
from resilience.runner.repeats import repeated_row
from resilience.verdicts import FAIL, FLAKY, PASS, UNKNOWN, is_failing
from tests.report.dom import parse

COMBO = "GLOBAL/torch_dist/sync"


def _run(verdict, k: int, base: str = "/runs/x/cases/001") -> ResultRow:
    checker = Verdict("durability", verdict, f"{verdict} here", [{"run": k}] if verdict == FAIL else [])
    return ResultRow(
        "kill",
        COMBO,
        verdict,
        f"durability: {verdict} here",
        1.0,
        (checker,),
        fault="kill",
        case_dir=f"{base}/repeat-{k}",
        replay="resilience run x.yaml --combos GLOBAL/torch_dist/sync",
        column="kill",
    )


def test_runs_that_differ_are_flaky_on_the_failing_run_with_every_outcome():
    k, row = repeated_row([_run(PASS, 1), _run(FAIL, 2), _run(PASS, 3)])
    assert k == 1 and row.verdict == FLAKY and is_failing(row.verdict)
    assert row.outcomes == "1 FAIL, 2 PASS"
    assert row.detail.startswith("3 runs with the same seed gave different verdicts: 1 FAIL, 2 PASS; FAIL on run 2")
    assert row.checkers[0].evidence == [{"run": 2}]  # the failing run's evidence
    assert row.case_dir == "/runs/x/cases/001/repeat-2"
    assert [(r.run, r.verdict, r.case_dir) for r in row.repeats] == [
        (k, v, f"/runs/x/cases/001/repeat-{k}") for k, v in ((1, PASS), (2, FAIL), (3, PASS))
    ]
    assert row.seconds == 3.0 and row.replay.endswith(" --repeat 3")


def test_runs_that_agree_keep_their_verdict_on_the_first_run():
    k, row = repeated_row([_run(FAIL, 1), _run(FAIL, 2), _run(FAIL, 3)])
    assert k == 0 and row.verdict == FAIL and row.case_dir.endswith("repeat-1")
    assert row.detail == "durability: FAIL here (3 runs with the same seed agreed)"
    assert row.outcomes == "3 FAIL"


def test_one_run_is_the_row_as_it_was():
    only = _run(PASS, 1)
    assert repeated_row([only]) == (0, only)
    assert "repeats" not in only.to_dict() and only.outcomes == ""


def test_a_framework_error_on_a_run_is_that_error_not_flaky():
    broke = ResultRow(
        "kill", COMBO, UNKNOWN, "framework error: boom", 0.0, (Verdict(FRAMEWORK, UNKNOWN, "boom"),), column="kill"
    )
    k, row = repeated_row([_run(PASS, 1), broke])
    assert k == 1 and row.verdict == UNKNOWN and "the framework broke on run 2 of 2 runs" in row.detail


def test_a_repeated_row_comes_back_from_json_and_older_schemas_stay_readable():
    _, row = repeated_row([_run(PASS, 1), _run(FAIL, 2)])
    d = json.loads(json.dumps(row.to_dict()))
    assert ROW_SCHEMA == 3 and d["schema"] == 3 and READABLE_SCHEMAS == (1, 2, 3)
    assert d["repeats"][1] == {
        "run": 2,
        "verdict": "FAIL",
        "detail": "durability: FAIL here",
        "case_dir": "/runs/x/cases/001/repeat-2",
        "seconds": 1.0,
    }
    assert ResultRow.from_dict(d) == row
    assert isinstance(ResultRow.from_dict(d).repeats[0], Repetition)
    for old in (1, 2):  # rows of before --repeat: no repeats, read as they are
        was = dict(_run(PASS, 1).to_dict(), schema=old)
        assert ResultRow.from_dict(was).repeats is None


def test_reports_show_a_flaky_case_with_each_run_and_its_folder(tmp_path):
    folder = RunFolder.create(str(tmp_path), "run", {"title": "resilience run", "cases": 2, "repeat": 3})
    base = f"{folder.path}/cases/000"
    for k in (1, 2, 3):
        (tmp_path / base / f"repeat-{k}").mkdir(parents=True)
    _, flaky = repeated_row([_run(PASS, 1, base), _run(FAIL, 2, base), _run(PASS, 3, base)])
    _, stable = repeated_row([_run(PASS, 1, base).with_extra(column="save"), _run(PASS, 2, base)])
    paths = folder.finish([flaky, stable.with_extra(column="save")])
    assert "FLAKY" in text_table([flaky])
    md = open(paths["report.md"]).read()
    assert "**1 passed, 1 not passed (1 FLAKY)**" in md and "runs per case `3, with the same seed`" in md
    assert "runs with the same seed: 1 FAIL, 2 PASS" in md
    assert "- run 2: **FAIL** in [cases/000/repeat-2/](cases/000/repeat-2/)" in md
    page = parse(open(paths["report.html"]).read())
    case = page.by_id("case-1")
    assert case.attrs["data-verdict"] == "FLAKY"
    runs = case.find(cls="runs")
    assert [a.attrs["href"] for a in runs.find_all("a")] == [f"cases/000/repeat-{k}/" for k in (1, 2, 3)]
    suite = ET.parse(paths["junit.xml"]).getroot()
    assert suite.attrib["failures"] == "1" and suite.attrib["errors"] == "0"
    failure = suite.find("testcase/failure")
    assert failure is not None and failure.attrib["type"] == "FLAKY"
    assert f"run 2: FAIL in {base}/repeat-2" in failure.text
