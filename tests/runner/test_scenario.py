import pytest

from resilience.runner.scenario import ScenarioError, load_file, load_text

GOOD = """
name: good
topology: tp2pp1dp1
combinations: [LEGACY/torch/sync, GLOBAL/torch_dist/async]
steps:
  - train: 2
  - save
  - resume: {topology: tp1pp1dp2, continue: 1}
expect: {loaded_iteration: 2}
"""


def test_a_good_scenario_loads_and_round_trips():
    s = load_text(GOOD, "good.yaml")
    assert [st.kind for st in s.steps] == ["train", "save", "resume"]
    assert [str(c) for c in s.combinations] == ["LEGACY/torch/sync", "GLOBAL/torch_dist/async"]
    again = load_text(s.to_yaml(), "again.yaml")
    assert again.to_dict() == s.to_dict()


@pytest.mark.parametrize("text, where, field", [
    ("steps:\n  - train: 2\n  - sav\n", "x.yaml:3", "steps.1"),
    ("steps:\n  - train: 0\n", "x.yaml:2", "steps.0.train"),
    ("topology: tp3pp1dp1\nsteps:\n  - save\n", "x.yaml:1", "topology"),
    ("combinations: [GLOBAL/torch/sync]\nsteps:\n  - save\n", "x.yaml:1", "combinations.0"),
    ("stepz:\n  - save\n", "x.yaml:1", "stepz"),
    ("model: {hidden: 30}\nsteps:\n  - save\n", "x.yaml:1", "model.hidden"),
    ("steps:\n  - resume: {topology: tp9}\n", "x.yaml:2", "steps.0.resume.topology"),
    ("steps: [train: 2\n", "x.yaml:2", "yaml"),
])
def test_a_bad_scenario_names_file_line_and_field(text, where, field):
    with pytest.raises(ScenarioError) as e:
        load_text(text, "x.yaml")
    assert e.value.problems[0].text("x.yaml").startswith(f"{where}: {field}"), str(e.value)


def test_unknown_step_lists_what_is_allowed():
    with pytest.raises(ScenarioError, match="allowed: train, save"):
        load_text("steps:\n  - explode\n", "x.yaml")


def test_missing_file_is_a_clear_error(tmp_path):
    with pytest.raises(ScenarioError, match="does not exist"):
        load_file(tmp_path / "nope.yaml")


def test_shipped_scenarios_all_validate():
    from pathlib import Path
    files = sorted((Path(__file__).parents[2] / "scenarios").glob("*.yaml"))
    for f in files:
        load_file(f)
