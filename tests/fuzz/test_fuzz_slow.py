"""Longer fuzzing on real ranks (`pytest -m slow tests/fuzz`): broken implementations are found and
shrunk all the way, two runs with one seed agree case for case, and the state machine drives every
combination through its lifecycle."""

import json

import pytest
from hypothesis import HealthCheck, Phase, settings
from hypothesis.stateful import run_state_machine_as_test

import resilience.strategies as rst
from resilience.cli import main
from resilience.runner.scenario import load_file
from resilience.vocab.combos import valid_combinations

pytestmark = [pytest.mark.slow, pytest.mark.multiprocess]


def _fuzz(tmp_path, *argv) -> tuple[int, dict, list]:
    code = main(["fuzz", "--out", str(tmp_path), "--max-world", "2", *argv])
    (run_dir,) = tmp_path.iterdir()
    report = json.loads((run_dir / "fuzz.json").read_text())
    return code, report, [load_file(f["scenario_file"]) for f in report["failures"]]


@pytest.mark.parametrize(
    "backend, combo, faults",
    [
        ("broken:no_checksum", "LEGACY/torch/sync", ["bit_flip"]),
        ("broken:ignores_topology", "LEGACY/torch/sync", []),
        ("broken:no_fsync", "GLOBAL/torch_dist/sync", ["lost_unsynced_writes"]),
    ],
)
def test_broken_implementations_are_found_and_shrunk(tmp_path, backend, combo, faults):
    code, report, (scenario,) = _fuzz(
        tmp_path,
        "--backend",
        backend,
        "--combos",
        combo,
        "--faults",
        *faults,
        "--mode",
        "scenarios",
        "--examples",
        "60",
        "--seed",
        "1",
        "--shrink-budget",
        "300",
    )
    assert code == 1, report
    assert len(scenario.steps) <= 4 and scenario.topology.world <= 2, scenario.to_yaml()


def test_one_seed_one_run(tmp_path):
    runs = []
    for name in ("a", "b"):
        (tmp_path / name).mkdir()
        code, report, failures = _fuzz(
            tmp_path / name,
            "--backend",
            "broken:no_checksum",
            "--combos",
            "LEGACY/torch/sync",
            "--faults",
            "bit_flip",
            "truncate",
            "--examples",
            "15",
            "--seed",
            "42",
            "--max-steps",
            "4",
        )
        runs.append((code, report["counts"], [f.to_yaml().replace(f.name, "") for f in failures]))
    assert runs[0] == runs[1]


def test_the_reference_survives_a_longer_run(tmp_path):
    code, report, failures = _fuzz(
        tmp_path, "--faults", *rst.SCENARIO_FAULTS, "--examples", "40", "--seed", "3", "--max-world", "4"
    )
    assert code == 0 and not failures, report


@pytest.mark.parametrize("combo", [str(c) for c in valid_combinations()])
def test_the_state_machine_on_every_combination(combo):
    machine = rst.lifecycle_machine(combinations=[combo], max_world=2, faults=list(rst.SCENARIO_FAULTS))
    run_state_machine_as_test(
        machine,
        settings=settings(
            max_examples=10,
            stateful_step_count=8,
            deadline=None,
            derandomize=True,
            database=None,
            suppress_health_check=list(HealthCheck),
            phases=[p for p in Phase if p is not Phase.explain],
        ),
    )
