"""The plugin as the matrix runs it: declared combinations honoured, framework errors apart from the
implementation's failures, property tests within a time and a shrink budget, Hypothesis events naming the
faults, and one run folder for the session. The cases are stood in for by a fake run_case (pure logic of
the plugin); real ranks run in test_plugin.py."""

import json
import textwrap
import xml.etree.ElementTree as ET

pytest_plugins = ["pytester"]

# run_case replaced in the pytester session: PASS, a FAIL for big seeds, or a broken framework
FAKE_RUN_CASE = textwrap.dedent("""
    import os, time
    from resilience.checkers import Verdict
    from resilience.verdicts import FAIL, PASS, WARN
    import resilience.runner.run as run


    def fake(scenario, combo, case_dir, *, backend=None, io=None, **kw):
        os.makedirs(case_dir, exist_ok=True)
        if os.environ.get("FAKE_MODE") == "broken":
            raise KeyError("a bug in the framework")
        time.sleep(float(os.environ.get("FAKE_SECONDS", "0")))
        bad = len(scenario.steps) >= int(os.environ.get("FAKE_FAIL_FROM", "1000000000"))
        verdict = FAIL if bad else WARN if os.environ.get("FAKE_MODE") == "warn" else PASS
        return run.CaseResult(scenario.name, str(combo), verdict, [Verdict("integrity", verdict, "fake")], 0.0,
                              case_dir, f"resilience run {case_dir}/scenario.yaml", "fake")


    REAL = run.run_case


    def pytest_configure(config):
        run.run_case = fake


    def pytest_unconfigure(config):
        run.run_case = REAL
""")

PROPERTY_TEST = textwrap.dedent("""
    import os
    from hypothesis import given, settings
    import resilience.strategies as rst
    from resilience.fuzz.events import faults_in

    # every example holds the fault, so what the run reports of it does not hang on the draws of a seed
    WITH_FAULT = rst.scenarios(max_world=2, max_steps=3, faults=["truncate"], moves=False).filter(faults_in)


    @settings(max_examples=int(os.environ.get("FAKE_EXAMPLES", "10000")), deadline=None, database=None)
    @given(WITH_FAULT)
    def test_property(resilience_run, scenario):
        resilience_run(scenario)
""")

SCENARIO = """
name: plain
topology: tp1pp1dp1
model: {num_layers: 1, hidden: 2, ffn_hidden: 2, heads: 1, vocab: 4}
combinations: [LEGACY/torch/sync, GLOBAL/torch_dist/sync]
steps: [{train: 1}, save, resume]
"""

# a backend that implements LOCAL/torch/sync only (this repository's test adapter)
LOCAL_ONLY = "tests.backends.inhouse:factory"


def test_only_the_declared_combinations_are_collected(pytester, monkeypatch):
    import os

    monkeypatch.setenv("PYTHONPATH", os.path.dirname(os.path.dirname(os.path.dirname(__file__))))
    pytester.makefile(
        ".yaml",
        **{
            "scenarios/plain": SCENARIO,
            "scenarios/local": SCENARIO.replace("name: plain", "name: local").replace(
                "[LEGACY/torch/sync, GLOBAL/torch_dist/sync]", "[LOCAL/torch/sync]"
            ),
        },
    )
    pytester.makepyfile(test_combo="def test_combo(resilience_combo):\n    pass\n")
    result = pytester.runpytest_subprocess(
        "scenarios",
        "test_combo.py",
        "--collect-only",
        "-q",
        "-p",
        "no:cacheprovider",
        f"--resilience-backend={LOCAL_ONLY}",
    )
    out = result.stdout.str()
    assert "local[LOCAL-torch-sync]" in out and "test_combo[LOCAL-torch-sync]" in out
    assert "plain[LEGACY" not in out and "test_combo[GLOBAL" not in out, out
    assert "plain[not-declared]" in out  # kept as one item that says why it is skipped
    skipped = pytester.runpytest_subprocess(
        "scenarios/plain.yaml", "-p", "no:cacheprovider", "-rs", f"--resilience-backend={LOCAL_ONLY}"
    )
    skipped.assert_outcomes(skipped=1)
    assert (
        "declares only LOCAL/torch/sync; the scenario asks for LEGACY/torch/sync, GLOBAL/torch_dist/sync"
        in skipped.stdout.str()
    )


def test_a_warning_passes_and_reaches_the_warnings_summary_with_its_replay(pytester, monkeypatch):
    monkeypatch.setenv("FAKE_MODE", "warn")
    pytester.makeconftest(FAKE_RUN_CASE)
    pytester.makefile(".yaml", **{"scenarios/plain": SCENARIO})
    result = pytester.runpytest("scenarios", "--resilience-combos=LEGACY/torch/sync", "-p", "no:cacheprovider")
    result.assert_outcomes(passed=1, warnings=1)
    assert "ResilienceWarning: fake; replay: resilience run" in result.stdout.str()


def test_a_framework_error_is_one_short_paragraph(pytester, monkeypatch):
    monkeypatch.setenv("FAKE_MODE", "broken")
    pytester.makeconftest(FAKE_RUN_CASE)
    pytester.makefile(".yaml", **{"scenarios/plain": SCENARIO})
    result = pytester.runpytest("scenarios", "--resilience-combos=LEGACY/torch/sync", "-p", "no:cacheprovider")
    result.assert_outcomes(failed=1)
    out = result.stdout.str()
    assert "framework error (not a defect of the implementation under test) in scenario 'plain'" in out
    assert "KeyError: 'a bug in the framework'" in out and "evidence: " in out and "framework-error" in out
    failure = out.split("= FAILURES =", 1)[1].split("short test summary", 1)[0]
    assert len(failure.splitlines()) < 12 and "pluggy" not in failure and "Traceback" not in failure, failure


def test_a_property_test_stops_at_its_time_budget_and_passes(pytester, monkeypatch):
    import hypothesis.core

    monkeypatch.setenv("FAKE_SECONDS", "0.05")
    # --hypothesis-seed sets Hypothesis's global seed in this process and nothing unsets it: a later fuzz run
    # in the same worker would then keep no example database
    monkeypatch.setattr(hypothesis.core, "global_force_seed", hypothesis.core.global_force_seed)
    pytester.makeconftest(FAKE_RUN_CASE)
    pytester.makepyfile(test_prop=PROPERTY_TEST)
    junit = pytester.path / "junit.xml"
    result = pytester.runpytest(
        "--resilience-time-budget=3", "-p", "no:cacheprovider", f"--junitxml={junit}", "--hypothesis-seed=1"
    )
    result.assert_outcomes(passed=1)
    props = {p.get("name"): p.get("value") for p in ET.parse(junit).getroot().iter("property")}
    assert props["resilience_stopped"].startswith("time budget spent after ")
    assert 1 <= int(props["resilience_cases"]) < 100 and props["verdict"] == "PASS" and props["replay"]
    assert "truncate x" in props["resilience_faults"]
    monkeypatch.setenv("FAKE_EXAMPLES", "5")  # a run Hypothesis ends itself prints its statistics: the events
    result = pytester.runpytest("-p", "no:cacheprovider", "--hypothesis-show-statistics")
    result.assert_outcomes(passed=1)
    assert "fault: truncate" in result.stdout.str() and "verdict: PASS" in result.stdout.str()


def test_a_failing_property_test_shrinks_within_its_budget(pytester, monkeypatch):
    monkeypatch.setenv("FAKE_FAIL_FROM", "3")  # a scenario of 3 steps or more fails
    monkeypatch.setenv("FAKE_SECONDS", "0.05")
    monkeypatch.setenv("FAKE_EXAMPLES", "300")
    pytester.makeconftest(FAKE_RUN_CASE)
    pytester.makepyfile(test_prop=PROPERTY_TEST)
    junit = pytester.path / "junit.xml"
    result = pytester.runpytest("--resilience-shrink-budget=0.5", "-p", "no:cacheprovider", f"--junitxml={junit}")
    result.assert_outcomes(failed=1)
    out = result.stdout.str()
    assert "FAIL: scenario" in out and "replay: resilience run" in out
    props = {p.get("name"): p.get("value") for p in ET.parse(junit).getroot().iter("property")}
    assert props["verdict"] == "FAIL" and props["evidence"]


def test_an_xdist_session_writes_one_run_folder(pytester, monkeypatch):
    pytester.makeconftest(FAKE_RUN_CASE)
    pytester.makefile(".yaml", **{f"scenarios/s{i}": SCENARIO.replace("name: plain", f"name: s{i}") for i in range(4)})
    out = pytester.path / "runs"
    result = pytester.runpytest_subprocess("scenarios", "-n", "2", "-p", "no:cacheprovider", f"--resilience-out={out}")
    result.assert_outcomes(passed=8)
    (session,) = list(out.iterdir())
    rows = json.loads((session / "results.json").read_text())
    assert len(rows) == 8 and {r["case_dir"].split("/")[-3].rsplit("-", 1)[-1] for r in rows} == {"gw0", "gw1"}
    assert (session / "report.html").exists() and (session / "junit.xml").exists()
    assert json.loads((session / "run.json").read_text())["backend"] == "per scenario"
    assert f"resilience: 8 cases, 8 passed, 0 not passed; report {session}/report.html" in result.stdout.str()
    # the session's coverage: what its scenarios exercised, every worker's cases together
    assert "resilience coverage: " in result.stdout.str() and " of 18 corners reached; never: " in result.stdout.str()
    assert "past-the-padding" in json.loads((session / "coverage.json").read_text())["unreached"]
