"""Whole scenarios on real ranks with the reference implementation."""

import json
import os

import psutil
import pytest

from resilience.cli import main
from resilience.errors import ConfigError
from resilience.runner.run import run_case
from resilience.runner.scenario import load_file, load_text
from resilience.vocab.combos import Combination

pytestmark = pytest.mark.multiprocess

SCENARIO = """
name: resume-elsewhere
topology: tp2pp1dp1
model: {optimizer: distributed}
steps:
  - train: 2
  - save
  - train: 1
  - save
  - resume: {topology: %s, continue: 2}
"""


@pytest.mark.parametrize(
    "combo, target, verdict",
    [
        ("LEGACY/torch/sync", "tp2pp1dp2", "PASS"),
        ("LEGACY/torch/sync", "tp1pp1dp1", "REFUSED-AS-EXPECTED"),
        ("LOCAL/torch/sync", "tp2pp1dp1", "PASS"),
        ("LOCAL/torch/sync", "tp2pp1dp2", "REFUSED-AS-EXPECTED"),
    ],
)
def test_reference_verdicts(tmp_path, combo, target, verdict):
    s = load_text(SCENARIO % target, "s.yaml")
    result = run_case(s, Combination.parse(combo), str(tmp_path / "case"))
    assert result.verdict == verdict, result.to_row()
    events = [json.loads(line) for line in open(tmp_path / "case" / "history.jsonl")]
    assert {"invoke", "ok"} <= {e["type"] for e in events}
    assert result.replay.startswith("resilience run ") and "--combos" in result.replay


def test_a_corruption_with_nothing_to_damage_is_unprobed(tmp_path):
    s = load_text(
        """
name: nothing-yet
topology: tp1pp1dp2
steps:
  - train: 1
  - corrupt: {kind: tracker_damage, how: delete}
  - save
  - resume: {topology: tp1pp1dp2}
""",
        "s.yaml",
    )
    result = run_case(s, Combination.parse("GLOBAL/torch_dist/sync"), str(tmp_path / "case"))
    assert result.verdict == "UNPROBED" and "nothing to delete" in result.detail, result.to_row()
    events = [json.loads(line) for line in open(tmp_path / "case" / "history.jsonl")]
    assert any(e["f"] == "corrupt" and e["type"] == "info" and e["value"]["applied"] is False for e in events)


def test_run_command_writes_the_run_folder(tmp_path, capsys):
    scenario = tmp_path / "s.yaml"
    scenario.write_text(SCENARIO % "tp2pp1dp2" + "combinations: [LEGACY/torch/sync]\n")
    code = main(["run", str(scenario), "--out", str(tmp_path / "runs")])
    out = capsys.readouterr().out
    assert code == 0, out
    (run_dir,) = (tmp_path / "runs").iterdir()
    for name in ("results.json", "run.json", "report.md", "report.html", "junit.xml"):
        assert (run_dir / name).is_file(), name
    rows = json.loads((run_dir / "results.json").read_text())
    assert rows[0]["combo"] == "LEGACY/torch/sync" and rows[0]["verdict"] == "PASS"
    assert {"combo", "fault", "transition", "verdict", "detail"} <= set(rows[0])
    assert any(p.name.endswith(".log") for p in (run_dir / "cases").rglob("rank0.log"))


def test_matrix_command_prints_the_table(tmp_path, capsys):
    code = main(
        [
            "matrix",
            "--combos",
            "LEGACY/torch/sync",
            "--faults",
            "save/load",
            "--transitions",
            "tp",
            "dp",
            "--out",
            str(tmp_path),
            "--json",
            str(tmp_path / "rows.json"),
        ]
    )
    out = capsys.readouterr().out
    assert code == 0, out
    assert "LEGACY/torch/sync" in out and "REFUSED" in out
    rows = json.loads((tmp_path / "rows.json").read_text())
    assert {(r["column"], r["verdict"]) for r in rows} == {
        ("save/load", "PASS"),
        ("tp", "REFUSED-AS-EXPECTED"),
        ("dp", "PASS"),
    }
    assert [r["transition"] for r in rows if r["column"] == "tp"] == ["tp2pp1dp1->tp1pp1dp1"]


def test_bad_scenario_is_one_clear_error(tmp_path, capsys):
    good = tmp_path / "good.yaml"
    good.write_text(SCENARIO % "tp2pp1dp2" + "combinations: [LEGACY/torch/sync]\n")
    bad = tmp_path / "bad.yaml"
    bad.write_text("steps:\n  - train: two\n")
    with pytest.raises(ConfigError, match=r"bad\.yaml:2: steps\.0\.train"):
        load_file(bad)
    # the good file first: every file is validated before any case starts, so nothing of it runs either
    assert main(["run", str(good), str(bad), "--out", str(tmp_path / "runs")]) == 2
    out, err = capsys.readouterr()
    assert err.splitlines() == [err.strip()] and err.startswith("resilience run: error: "), err
    assert "bad.yaml:2: steps.0.train" in err and "Traceback" not in err
    assert out == ""  # no "run folder ..." line: no case began
    assert sorted(os.listdir(tmp_path)) == ["bad.yaml", "good.yaml"]  # no runs/, no case folder
    assert not psutil.Process().children(recursive=True)  # no rank was started
