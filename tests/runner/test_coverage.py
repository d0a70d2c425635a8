"""Coverage: per dimension what a run's scenarios exercised, and which corners none of them reached."""

from pathlib import Path

from resilience.runner.corners import CORNERS, EACH_FILE, corner_names
from resilience.runner.coverage import REACHES, Coverage, of_files
from resilience.runner.matrix import FAULTS, TRANSITIONS, cases
from resilience.runner.scenario import load_file
from resilience.vocab.combos import valid_combinations

ROOT = Path(__file__).resolve().parents[2]  # the repository

FILES = ["iter_{iteration:07d}/__0_0.distcp", "iter_{iteration:07d}/__1_0.distcp"]


def _coverage(corners=()):
    got = cases(valid_combinations(), list(FAULTS), dict(TRANSITIONS), 0, corners=corners, data_files=lambda c: FILES)
    return Coverage().add_all(c.scenario for c in got)


def test_every_corner_has_a_value_that_reaches_it_and_the_default_matrix_reaches_them_all():
    assert set(REACHES) == {*CORNERS, EACH_FILE}
    full = _coverage(corner_names(None))
    assert full.unreached() == []
    assert "corners never reached: none" in full.render()


def test_the_fixed_sample_alone_leaves_the_corners_unreached_and_says_which():
    fixed = _coverage()
    never = fixed.unreached()
    assert "past-the-padding" in never and "crash-during-resave" in never and "damage-each-file" in never
    assert "two-dims-changed" not in never and "world-of-three" not in never  # tp+pp+dp and dp 2 -> 3 reach them
    assert fixed.seen["iterations"] == {"start 0"} and fixed.seen["delays"] == {"milliseconds"}
    assert fixed.to_dict()["unreached"] == never


def test_a_scenario_file_reaches_what_it_does():
    crash = Coverage().add_all([load_file(ROOT / "scenarios" / "crash-during-load.yaml")])
    assert "a crash during a load" in crash.seen["sequences"] and "crash-during-load" not in crash.unreached()
    resave = Coverage().add_all([load_file(ROOT / "scenarios" / "resave-same-iteration.yaml")])
    assert "a crash during a re-save" in resave.seen["sequences"]
    padding = Coverage().add_all([load_file(ROOT / "scenarios" / "iterations-past-the-padding.yaml")])
    assert "saves past 9,999,999" in padding.seen["iterations"] and "past-the-padding" not in padding.unreached()


def test_coverage_of_kept_files_skips_what_does_not_read_back_and_says_why_it_could_not_be_kept(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("steps: [{meteor: 1}]\n")
    cov = of_files([str(ROOT / "scenarios" / "crash-during-load.yaml"), str(bad), str(tmp_path / "gone.yaml")])
    assert "a crash during a load" in cov.seen["sequences"]
    assert cov.keep(str(tmp_path)) is None and (tmp_path / "coverage.json").exists()
    assert "No such file or directory" in cov.keep(str(tmp_path / "no" / "such"))
