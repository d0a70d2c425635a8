"""--repeat N on `resilience run` and `resilience matrix`: each case N times with the same seed, each run in
its own folder; runs that differ are FLAKY (every outcome shown, with each run's folder), runs that agree
keep their verdict, one run is the old behaviour."""

from __future__ import annotations

import json
import os

import pytest

from resilience.cli import main

from .flaky_backends import FLAKY_BACKEND, RACE_SCENARIO, RACING_BACKEND, SCENARIO

pytestmark = pytest.mark.multiprocess


@pytest.fixture
def flaky(tmp_path, monkeypatch):
    """The scenario file, with the flaky backend's run counter in a folder of the test's."""
    counter = tmp_path / "counter"
    counter.mkdir()
    monkeypatch.setenv("RESILIENCE_TEST_FLAKY_DIR", str(counter))
    path = tmp_path / "s.yaml"
    path.write_text(SCENARIO)
    return str(path)


def _rows(out) -> list[dict]:
    (run_dir,) = [os.path.join(out, d) for d in os.listdir(out)]
    return json.load(open(os.path.join(run_dir, "results.json")))


@pytest.mark.parametrize("workers", ["1", "2"])
def test_runs_that_differ_are_flaky_with_every_outcome(tmp_path, flaky, capsys, workers):
    out = tmp_path / "runs"
    argv = ["run", flaky, "--backend", FLAKY_BACKEND, "--repeat", "3", "--workers", workers, "--out", str(out)]
    assert main(argv) == 1
    stdout = capsys.readouterr().out
    (row,) = _rows(out)
    assert row["schema"] == 3 and row["verdict"] == "FLAKY", row
    # the counter numbers runs in the order they save: which run fails depends on the workers, not how many
    assert sorted(r["verdict"] for r in row["repeats"]) == ["FAIL", "PASS", "PASS"]
    assert [r["run"] for r in row["repeats"]] == [1, 2, 3]
    for r in row["repeats"]:
        assert r["case_dir"].endswith(f"repeat-{r['run']}") and os.path.isfile(f"{r['case_dir']}/history.jsonl")
    failed = next(r for r in row["repeats"] if r["verdict"] == "FAIL")
    assert row["case_dir"] == failed["case_dir"]  # the row's evidence is the failing run's
    assert "gave different verdicts: 1 FAIL, 2 PASS" in row["detail"]
    assert "cannot serialise the optimizer state" in row["detail"]
    assert row["replay"].endswith("--repeat 3")
    assert "0 passed, 1 not passed (1 FLAKY)" in stdout
    assert f"run {failed['run']}: FAIL in {failed['case_dir']}" in stdout


def test_a_pruner_racing_its_own_writer_thread_is_flaky_and_names_the_deletion(tmp_path, flaky, capsys):
    """Which of two unsynchronised threads wins decides the verdict: a retention FAIL when the pruner
    deletes the acknowledged checkpoint before the writer committed its successor, a PASS when it does
    not (the backend steers the race by the run's number, so both happen in five runs)."""
    scenario, out = tmp_path / "race.yaml", tmp_path / "runs"
    scenario.write_text(RACE_SCENARIO)
    argv = ["run", str(scenario), "--backend", RACING_BACKEND, "--repeat", "5", "--workers", "1", "--out", str(out)]
    assert main(argv) == 1
    (row,) = _rows(out)
    assert row["verdict"] == "FLAKY", row["detail"]
    assert sorted(r["verdict"] for r in row["repeats"]) == ["FAIL", "FAIL", "PASS", "PASS", "PASS"], row["repeats"]
    [retention] = [c for c in row["checkers"] if c["checker"] == "retention"]
    assert retention["status"] == "FAIL", retention
    first = retention["evidence"][0]
    assert (first["op"], first["rank"], first["thread"]) == ("rmtree", 0, "writer pruner"), first
    assert first["path"].startswith("iter_0000001/") and first["iteration"] == 1
    assert "by rank 0 (pid" in row["detail"] and "writer thread 'pruner'" in row["detail"], row["detail"]


def test_one_run_is_the_old_behaviour(tmp_path, flaky):
    out = tmp_path / "runs"
    assert main(["run", flaky, "--backend", FLAKY_BACKEND, "--workers", "1", "--out", str(out)]) == 0
    (row,) = _rows(out)
    assert row["verdict"] == "PASS" and "repeats" not in row and "repeat" not in row["replay"]
    assert not os.path.basename(row["case_dir"]).startswith("repeat-")
    assert main(["run", flaky, "--backend", FLAKY_BACKEND, "--repeat", "1", "--out", str(tmp_path / "again")]) == 1
    (row,) = _rows(tmp_path / "again")
    assert row["verdict"] == "FAIL" and "repeats" not in row  # the backend's second run, judged alone


def test_a_stable_case_keeps_its_verdict_in_the_matrix(tmp_path, capsys):
    out, rows = tmp_path / "runs", tmp_path / "rows.json"
    argv = ["matrix", "--combos", "LEGACY/torch/sync", "--faults", "save/load", "--transitions", "none"]
    argv += ["--repeat", "3", "--workers", "2", "--out", str(out), "--json", str(rows)]
    assert main(argv) == 0, capsys.readouterr().out
    (row,) = json.loads(rows.read_text())
    assert row["verdict"] == "PASS" and row["detail"].endswith("(3 runs with the same seed agreed)")
    assert [r["verdict"] for r in row["repeats"]] == ["PASS"] * 3
    assert row["case_dir"].endswith("repeat-1")
    assert "x 3 runs each" in capsys.readouterr().out
