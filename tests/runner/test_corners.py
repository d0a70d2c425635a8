"""The corners table: one case per corner for every combination, chosen with --corners, each saying in one
line what it probes; the reference passes every corner (or refuses a topology change its combination
refuses), and an expectation the combination's contract makes moot is N/A, not a FAIL."""

from __future__ import annotations

import json

import pytest

from resilience.cli import main
from resilience.errors import ConfigError
from resilience.runner.corners import CORNERS, EACH_FILE, corner_names, each_file_scenarios, is_file_column
from resilience.runner.matrix import cases
from resilience.vocab.combos import valid_combinations

KINDS = {"iterations", "sizes", "time", "sequences", "files", "values", "layouts"}


def test_every_corner_is_a_valid_scenario_that_says_in_one_line_what_it_probes():
    for name, corner in CORNERS.items():
        scenario = corner.scenario(7)
        assert scenario.name == f"corner-{name}" and scenario.seed == 7
        assert corner.kind in KINDS and "corner" in scenario.tags
        assert corner.probes and "\n" not in corner.probes and scenario.description == corner.probes


def test_corners_are_chosen_by_name_all_or_none():
    assert corner_names(None) == [*CORNERS, EACH_FILE] == corner_names(["all"])
    assert corner_names(["none"]) == []
    assert corner_names(["two-crashes", "iteration-zero", "two-crashes"]) == ["two-crashes", "iteration-zero"]
    with pytest.raises(ConfigError, match="no corner 'meteor'.*use all, none or names from iterations-9-to-12"):
        corner_names(["meteor"])


def test_each_combination_gets_one_case_per_corner():
    combos = valid_combinations()
    got = cases(combos, [], {}, 0, corners=["iteration-zero", "slow-storage"])
    assert len(got) == 2 * len(combos)
    assert {(str(c.combo), c.column) for c in got} == {
        (str(c), n) for c in combos for n in ("iteration-zero", "slow-storage")
    }


def test_an_unknown_corner_is_one_clear_error(tmp_path, capsys):
    assert main(["matrix", "--corners", "meteor", "--out", str(tmp_path)]) == 2
    assert "--corners: no corner 'meteor'" in capsys.readouterr().err
    assert not any(tmp_path.iterdir())


@pytest.mark.multiprocess
def test_the_reference_passes_every_corner(tmp_path, capsys):
    out = tmp_path / "rows.json"
    argv = ["matrix", "--faults", "none", "--transitions", "none", "--corners", "all", "--out", str(tmp_path)]
    combos = ["GLOBAL/torch_dist/async", "LEGACY/torch/sync"]
    assert main([*argv, "--combos", *combos, "--json", str(out)]) == 0
    rows = json.loads(out.read_text())
    assert {(r["combo"], r["column"]) for r in rows if not is_file_column(r["column"])} == {
        (c, n) for c in combos for n in CORNERS
    }
    # each data-file role of the learned layout, in each kind of damage (LEGACY: the model's and the optimizer's)
    files = {r["column"] for r in rows if r["combo"] == "LEGACY/torch/sync" and is_file_column(r["column"])}
    assert files == {
        f"{k}:{n}" for k in ("truncate", "bitflip", "delete") for n in ("model_optim_rng.pt", "distrib_optim.pt")
    }
    said = capsys.readouterr().out
    assert "\ncorners:\n" in said and "iterations-9-to-12" in said
    assert "\ncoverage:\n" in said and "corners never reached: none" in said
    (run_dir,) = [p for p in tmp_path.iterdir() if p.is_dir()]
    assert json.loads((run_dir / "coverage.json").read_text())["unreached"] == []
    # the reports hold the corners transposed too, each line with what it probes, and no empty matrix
    report = (run_dir / "report.md").read_text()
    assert "## Corners\n\n| corner | GLOBAL/torch_dist/async | LEGACY/torch/sync | what it probes |" in report
    assert f"| past-the-padding | PASS | PASS | {CORNERS['past-the-padding'].probes} |" in report
    assert "| combination |" not in report
    assert '<table class="matrix corners">' in (run_dir / "report.html").read_text()
    for r in rows:
        # LEGACY refuses a pp change: refused as its contract says, the expected iteration is moot
        refused = r["combo"] == "LEGACY/torch/sync" and r["column"] in ("two-dims-changed", "world-of-three")
        assert r["verdict"] == ("REFUSED-AS-EXPECTED" if refused else "PASS"), (r["column"], r["detail"])
        if refused:
            expect = next(c for c in r["checkers"] if c["checker"] == "expect")
            assert expect["status"] == "N/A" and "refused, as the combination promises" in expect["detail"]


@pytest.mark.multiprocess
def test_columns_chosen_with_faults_run_without_the_corners_unless_they_are_named(tmp_path):
    out = tmp_path / "rows.json"
    argv = ["matrix", "--combos", "GLOBAL/torch_dist/sync", "--faults", "save/load", "--out", str(tmp_path)]
    assert main([*argv, "--transitions", "none", "--json", str(out)]) == 0
    assert [r["column"] for r in json.loads(out.read_text())] == ["save/load"]
    assert main([*argv, "--transitions", "none", "--corners", "iteration-zero", "--json", str(out)]) == 0
    assert [r["column"] for r in json.loads(out.read_text())] == ["save/load", "iteration-zero"]


def test_a_job_timeout_grows_by_the_delays_its_stragglers_are_told_to_wait():
    from types import SimpleNamespace

    from resilience.faults import Fault
    from resilience.launch.outcomes import MAX_JOB_TIMEOUT
    from resilience.runner.case_jobs import _grown_to_fit

    def armed(record):
        return SimpleNamespace(fault=Fault.from_dict(record))

    slow = [armed({"kind": "slow_write", "delay": 30.0, "times": 2}), armed({"kind": "slow_write", "delay": 5.0})]
    assert _grown_to_fit(120.0, slow + [armed({"kind": "io_error"})]) == 120.0 + 60.0 + 5.0
    assert _grown_to_fit(120.0, [armed({"kind": "slow_write", "delay": 1e6})]) == MAX_JOB_TIMEOUT


def test_damage_each_file_strikes_each_role_in_the_file_of_a_rank_drawn_from_the_seed():
    templates = ["iter_{iteration:07d}/__0_0.distcp", "iter_{iteration:07d}/__1_0.distcp", "x/metadata.bin"]
    got = each_file_scenarios(templates, 3)
    assert [c for c, _ in got] == [
        f"{k}:{r}" for r in ("__N_N.distcp", "metadata.bin") for k in ("truncate", "bitflip", "delete")
    ]
    damage = [s.steps[-2].args for _, s in got]
    assert {d["kind"] for d in damage} == {"truncate", "bitflip", "delete"}
    ranks = {each_file_scenarios(templates, seed)[0][1].steps[-2].args["file"] for seed in range(12)}
    assert ranks == {"*/iter_*/__0_0.distcp", "*/iter_*/__1_0.distcp"}  # the seed draws either rank's file
    nvrx = each_file_scenarios(["local/iter_{iteration:07d}_1_local.pt", "local/iter_{iteration:07d}_0_local.pt"], 0)
    assert nvrx[0][0] == "truncate:iter_N_N_local.pt" and nvrx[0][1].name == "corner-truncate-iter_N_N_local.pt"
    [(column, fallback)] = each_file_scenarios(None, 0)  # no layout learned: one data file drawn from the seed
    assert column == EACH_FILE and "file" not in fallback.steps[-2].args


def test_the_corners_table_is_one_line_per_corner_then_what_each_probes():
    from resilience.report.matrix_table import transposed_table
    from resilience.report.result_row import ResultRow
    from resilience.verdicts import FAIL, PASS

    rows = [
        ResultRow("corner-two-crashes", "LEGACY/torch/sync", PASS, column="two-crashes"),
        ResultRow("corner-two-crashes", "GLOBAL/torch_dist/sync", FAIL, column="two-crashes"),
        ResultRow("corner-iteration-zero", "GLOBAL/torch_dist/sync", PASS, column="iteration-zero"),
    ]
    text = transposed_table(rows, ["two-crashes", "iteration-zero"], {"two-crashes": "two in a row"})
    head, crashes, zero, _, said, line = text.splitlines()
    assert head.split() == ["corner", "LEGACY/torch/sync", "GLOBAL/torch_dist/sync"]
    assert crashes.split() == ["two-crashes", "PASS", "FAIL"] and zero.split() == ["iteration-zero", "-", "PASS"]
    assert said == "what each probes:" and line == "  two-crashes: two in a row"
