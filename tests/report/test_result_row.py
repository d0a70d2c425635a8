"""A result row is written and read in one place: the same row back from JSON, a row written before the
schema field (version 1) read as it is, a row of a newer schema refused with the file named."""

from __future__ import annotations

import json

import pytest

from resilience.checkers import Verdict
from resilience.cli import main
from resilience.errors import ConfigError
from resilience.report import RunFolder
from resilience.report.result_row import ROW_SCHEMA, FaultResult, ResultRow, rows_from_json
from resilience.verdicts import FAIL, PASS, UNPROBED

COMBO = "GLOBAL/torch_dist/sync"


def test_a_row_comes_back_from_json_as_it_was_written():
    row = ResultRow(
        "kill",
        COMBO,
        FAIL,
        "durability: lost iteration 3",
        1.23456,
        (Verdict("durability", FAIL, "lost iteration 3", [{"iteration": 3}]),),
        (FaultResult("rank_crash rank=1", "fired", "fired"),),
        fault="kill",
        case_dir="/runs/x/cases/001",
        replay="resilience run x.yaml",
        column="kill",
        events=("fault: rank_crash", "verdict: FAIL"),
        phase="searching",
    )
    d = json.loads(json.dumps(row.to_dict()))
    assert d["schema"] == ROW_SCHEMA and d["seconds"] == 1.235 and d["verdict"] == "FAIL"
    assert ResultRow.from_dict(d) == row


def test_fields_a_run_does_not_set_are_left_out():
    d = ResultRow("save-load", COMBO, PASS).to_dict()
    assert set(d) == {
        "schema",
        "scenario",
        "combo",
        "fault",
        "transition",
        "verdict",
        "detail",
        "seconds",
        "checkers",
        "faults",
        "case_dir",
        "replay",
    }


def test_a_row_written_before_the_schema_field_is_version_1_and_read():
    old = {
        "scenario": "kill",
        "combo": COMBO,
        "fault": "kill",
        "transition": None,
        "verdict": "UNPROBED",
        "detail": "its trigger never came",
        "seconds": 0.5,
        "checkers": [{"checker": "faults", "status": "UNPROBED", "detail": "never fired", "evidence": []}],
        "faults": [{"fault": "rank_crash", "status": "never fired", "detail": "its trigger never came"}],
        "case_dir": "cases/000",
        "replay": "resilience run x.yaml",
        "column": "kill",
    }
    (row,) = rows_from_json([old])
    assert row.verdict is UNPROBED and row.checkers[0].checker == "faults" and row.faults[0].status == "never fired"
    assert row.to_dict() == dict(old, schema=ROW_SCHEMA)


def test_a_row_of_a_newer_schema_is_refused_with_its_file_named(tmp_path, capsys):
    folder = RunFolder.create(str(tmp_path), "newer", {"title": "t", "cases": 1})
    with open(folder.jsonl, "a") as f:
        f.write(json.dumps(dict(ResultRow("a", COMBO, PASS).to_dict(), schema=ROW_SCHEMA + 1)) + "\n")
    with pytest.raises(ConfigError, match=f"results.jsonl: a row of schema {ROW_SCHEMA + 1}"):
        folder.rows()
    assert main(["report", folder.path]) == 2
    assert f"schema {ROW_SCHEMA + 1}" in capsys.readouterr().err
