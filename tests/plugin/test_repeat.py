"""--resilience-repeat N: each case of the session run N times with the same seed; runs whose verdicts
differ are FLAKY, which fails the test with every outcome; a bad value is one usage error."""

from __future__ import annotations

import json
import os

import pytest

import resilience.runner.scenario  # noqa: F401  (torch once, out here: in-process runs must not import it afresh)
from tests.commands.flaky_backends import FLAKY_BACKEND as BACKEND, SCENARIO

pytest_plugins = ["pytester"]

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


@pytest.mark.parametrize(
    "option, says",
    [
        ("--resilience-repeat=0", "--resilience-repeat: must be between 1 and 100, got 0"),
        ("--resilience-repeat=x", "--resilience-repeat: must be a whole number of runs, got 'x'"),
    ],
)
def test_a_bad_repeat_is_a_usage_error(pytester, option, says):
    result = pytester.runpytest(option)
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    assert says in result.stderr.str()


@pytest.mark.multiprocess
def test_a_case_whose_runs_differ_fails_its_test_as_flaky(pytester, monkeypatch, tmp_path):
    counter = tmp_path / "counter"
    counter.mkdir()
    monkeypatch.setenv("RESILIENCE_TEST_FLAKY_DIR", str(counter))
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(p for p in (REPO, os.environ.get("PYTHONPATH")) if p))
    pytester.makefile(".yaml", **{"scenarios/save_resume": SCENARIO})
    out = pytester.path / "runs"
    common = ["scenarios", "-p", "no:cacheprovider", "-n", "0", f"--resilience-backend={BACKEND}"]
    once = pytester.runpytest_subprocess(*common, f"--resilience-out={out}/once")
    once.assert_outcomes(passed=1)  # the backend's first run passes: one run, the old behaviour
    for name in os.listdir(counter):  # the backend's runs counted afresh: the first of the next session passes
        os.remove(counter / name)
    result = pytester.runpytest_subprocess(*common, "--resilience-repeat=3", f"--resilience-out={out}/three")
    result.assert_outcomes(failed=1)
    text = result.stdout.str()
    assert "FLAKY: scenario 'save-resume'" in text and "gave different verdicts: 1 FAIL, 2 PASS" in text, text
    (run_dir,) = [p for p in (out / "three").iterdir() if p.is_dir()]
    (row,) = json.loads((run_dir / "results.json").read_text())
    assert row["verdict"] == "FLAKY" and [r["verdict"] for r in row["repeats"]] == ["PASS", "FAIL", "PASS"]
    for r in row["repeats"]:  # every run's outcome and folder, in the failing test's message too
        assert r["case_dir"].endswith(f"repeat-{r['run']}") and os.path.isdir(r["case_dir"])
        assert f"run {r['run']}: {r['verdict']} in {r['case_dir']}" in text


def test_the_option_is_in_the_plugins_group(pytester):
    pytester.runpytest("--help").stdout.fnmatch_lines(
        ["checkpoint resilience (resilience.pytest_plugin):", "*--resilience-repeat=N*"]
    )
