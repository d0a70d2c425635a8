"""`resilience job --fuzz`: drawn fault schedules on the quick test job, each a case in the run folder; a
failure shrunk to a minimal schedule whose replay command runs that one case again."""

import json
import os
import shlex

import pytest

from resilience.cli import main
from resilience.job.fuzzing import Schedule

from .conftest import quick

pytestmark = pytest.mark.multiprocess


def test_a_schedule_is_an_aimed_column():
    from resilience.job.columns import COLUMNS
    from resilience.job.fuzzing import FUZZED

    assert set(FUZZED) <= set(COLUMNS)
    assert Schedule("kill-rank-write", 2, 1, 512, 2).spec() == "kill-rank-write@save=2,rank=1,byte=512"
    assert Schedule("tracker-empty", 1, 1, 512, 1).spec() == "tracker-empty@save=1"  # no rank, no byte to aim


def test_a_correct_job_fuzzed_passes_and_every_case_is_a_row(tmp_path, quick_golden, capsys):
    out = tmp_path / "runs"
    argv = ["job", "--fuzz", "--examples", "6", "--seed", "3", "--golden", quick_golden, "--out", str(out)]
    assert main([*argv, "--", *quick()]) == 0
    said = capsys.readouterr().out
    assert said.startswith("fuzz: seed 3; 6 schedules") and "no failure found" in said, said
    [folder] = list(out.iterdir())
    rows = json.loads((folder / "results.json").read_text())
    assert 1 <= len(rows) <= 6 and all(r["verdict"] in ("PASS", "N/A") for r in rows), rows
    assert all("@save=" in r["column"] for r in rows)


def test_a_failure_is_shrunk_to_a_schedule_whose_replay_fails_again(tmp_path, quick_golden, capsys):
    out = tmp_path / "runs"
    argv = ["job", "--fuzz", "--examples", "10", "--seed", "1", "--golden", quick_golden, "--out", str(out)]
    assert main([*argv, "--", *quick("--variant", "scratch")]) == 1
    said = capsys.readouterr().out
    line = next(x for x in said.splitlines() if x.startswith("FAIL (minimal schedule: "))
    assert "resumed_newest" in line or "checkpoint_left" in line, said
    replay = next(x for x in said.splitlines() if x.strip().startswith("replay: ")).split("replay: ", 1)[1]
    args = shlex.split(replay)
    assert args[:3] == ["resilience", "job", "--column"] and "@save=" in args[3], replay
    assert main(args[1:]) == 1  # the replay runs the one case again, and it fails again
    assert os.path.isdir(out)
