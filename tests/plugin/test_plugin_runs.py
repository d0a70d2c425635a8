"""resilience_run, in process with run_case replaced by a fake (no ranks): every selected combination runs
and the failures are raised together at the end, each combination in JUnit; inside a property test an
UNPROBED example is a gap in the search, never the example a FAIL shrinks to."""

import json
import xml.etree.ElementTree as ET

import resilience.runner.scenario  # noqa: F401  (torch once, out here: in-process runs must not import it afresh)

pytest_plugins = ["pytester"]

THREE_COMBOS = """
name: three-ways
topology: tp1pp1dp1
model: {num_layers: 1, hidden: 2, ffn_hidden: 2, heads: 1, vocab: 4}
combinations: [LEGACY/torch/sync, GLOBAL/torch_dist/sync, LOCAL/torch/sync]
steps: [{train: 1}, save, {corrupt: {kind: bitflip, rank: 0, seed: 1}}, resume]
"""

# run_case replaced for the inner session: VERDICTS[combo], or by the number of saves (FAIL from three on,
# UNPROBED below: the bit flip "never fired")
FAKE = """
import pytest

import resilience.runner.run as run
from resilience.checkers import Verdict

VERDICTS = {"LEGACY/torch/sync": "FAIL", "GLOBAL/torch_dist/sync": "PASS", "LOCAL/torch/sync": "UNPROBED"}


def fake(scenario, combo, case_dir, **kw):
    saves = sum(s.kind == "save" for s in scenario.steps)
    verdict = VERDICTS[str(combo)] if scenario.name == "three-ways" else "FAIL" if saves >= 3 else "UNPROBED"
    if verdict == "UNPROBED":
        faults = [{"fault": "bit_flip rank=0", "status": "never fired", "detail": "nothing to flip"}]
        verdicts = [Verdict("faults", verdict, "configured fault never fired")]
    else:
        faults = [{"fault": "bit_flip rank=0", "status": "fired", "detail": "fired"}]
        evidence = [{"problem": "a flipped bit loaded as wrong values"}] if verdict == "FAIL" else []
        verdicts = [Verdict("integrity", verdict, f"{combo}: {verdict.lower()}", evidence)]
    detail = f"{verdicts[0].checker}: {verdicts[0].detail}"
    return run.CaseResult(scenario.name, str(combo), verdict, verdicts, 0.0, case_dir, "", detail, faults=faults)


@pytest.fixture(autouse=True)
def _fake(monkeypatch):  # undone after the test: this session runs inside the outer one's worker
    monkeypatch.setattr(run, "run_case", fake)
"""


def _properties(junit, name: str) -> dict:
    (case,) = [c for c in ET.parse(junit).getroot().iter("testcase") if c.get("name") == name]
    return {p.get("name"): p.get("value") for p in case.iter("property")}


def test_a_failing_combination_hides_none_of_the_others(pytester):
    """The first combination fails: the second and third still run, and the one exception raised at the end
    is of the first's class, names both failures with their replay commands, and JUnit has each combination."""
    pytester.makefile(".yaml", three=THREE_COMBOS)
    pytester.makeconftest(FAKE)
    pytester.makepyfile(
        test_three="""
        import pytest

        from resilience.fuzz.judge import ScenarioFailed


        def test_every_combination(resilience_run):
            resilience_run("three.yaml")


        def test_caught(resilience_run):
            with pytest.raises(ScenarioFailed) as caught:
                resilience_run("three.yaml")
            e = caught.value
            assert type(e).__name__ == "FailInIntegrityDamage" and e.result.combo == "LEGACY/torch/sync"
            assert [f.result.verdict for f in e.failures] == ["FAIL", "UNPROBED"]
            assert e.failures[0] is e and type(e.failures[1]).__name__ == "UnprobedInFaults"
        """
    )
    junit, out = pytester.path / "junit.xml", pytester.path / "runs"
    result = pytester.runpytest(
        "test_three.py", "-p", "no:cacheprovider", f"--junitxml={junit}", f"--resilience-out={out}"
    )
    result.assert_outcomes(failed=1, passed=1)
    text = result.stdout.str()
    assert "FAIL: scenario 'three-ways' with LEGACY/torch/sync" in text
    assert "1 more combination failed:" in text and "UNPROBED with LOCAL/torch/sync (UnprobedInFaults)" in text
    assert text.count("replay: resilience run ") >= 2  # each failure with its own replay command
    props = _properties(junit, "test_every_combination")
    for combo, verdict in [
        ("LEGACY/torch/sync", "FAIL"),
        ("GLOBAL/torch_dist/sync", "PASS"),
        ("LOCAL/torch/sync", "UNPROBED"),
    ]:
        line = props[f"resilience_case[{combo}]"]
        assert line.startswith(f"{verdict}: ") and "; replay: resilience run " in line and "; evidence: " in line
    assert props["resilience_cases"] == "3"
    (run_dir,) = [p for p in out.iterdir() if p.is_dir()]
    rows = json.loads((run_dir / "results.json").read_text())
    assert sorted(r["combo"] for r in rows if r["test"].endswith("test_every_combination")) == sorted(
        ["LEGACY/torch/sync", "GLOBAL/torch_dist/sync", "LOCAL/torch/sync"]
    )


def test_a_property_test_shrinks_a_fail_to_a_fail_never_to_an_unprobed_example(pytester):
    """Fewer than three saves leave the fault unfired (UNPROBED); Hypothesis may slip to any smaller
    failure (report_multiple_bugs off): the minimal example is still the FAIL, at three saves, and the
    UNPROBED examples are counted as gaps."""
    pytester.makeconftest(FAKE)
    pytester.makepyfile(
        test_prop="""
        from hypothesis import given, settings, strategies as st

        from resilience.runner.scenario import from_dict

        MODEL = {"num_layers": 1, "hidden": 2, "ffn_hidden": 2, "heads": 1, "vocab": 4}


        @settings(max_examples=40, deadline=None, database=None, derandomize=True, report_multiple_bugs=False)
        @given(st.integers(1, 8))
        def test_property(resilience_run, saves):
            steps = [{"train": 1}] + ["save"] * saves + [{"corrupt": {"kind": "bitflip", "rank": 0, "seed": 1}}]
            scenario = {"name": "saves", "topology": "tp1pp1dp1", "model": MODEL, "steps": steps}
            resilience_run(from_dict(dict(scenario, combinations=["LEGACY/torch/sync"])))
        """
    )
    junit = pytester.path / "junit.xml"
    result = pytester.runpytest("test_prop.py", "-p", "no:cacheprovider", f"--junitxml={junit}")
    result.assert_outcomes(failed=1)
    text = result.stdout.str()
    assert "FAIL: scenario 'saves' with LEGACY/torch/sync" in text and "saves=3" in text
    assert "UNPROBED: scenario" not in text
    props = _properties(junit, "test_property")
    assert props["resilience_gaps"].endswith("UNPROBED cases tested nothing (not shrunk)")
    assert int(props["resilience_gaps"].split()[0]) >= 2  # one and two saves, at least


def test_a_plain_test_still_fails_on_unprobed(pytester):
    """Outside a property test the default is every command's rule: an UNPROBED case is not passed."""
    pytester.makefile(".yaml", three=THREE_COMBOS)
    pytester.makeconftest(FAKE)
    pytester.makepyfile(
        test_one="""
        def test_unprobed(resilience_run):
            resilience_run("three.yaml", combos=["LOCAL/torch/sync"])
        """
    )
    result = pytester.runpytest("test_one.py", "-p", "no:cacheprovider")
    result.assert_outcomes(failed=1)
    assert "UNPROBED: scenario 'three-ways' with LOCAL/torch/sync" in result.stdout.str()
