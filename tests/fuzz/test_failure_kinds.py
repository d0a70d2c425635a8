"""Shrinking keeps the failure: a failure's class names its verdict, checker and kind of evidence, a failing
example shrinks only to examples failing the same way, and an UNPROBED example is a gap in the search, never
what a FAIL shrinks to. Fast: run_case is a fake, as in test_fuzz_command."""

import json
import os

import pytest

from resilience.checkers import FAIL, PASS, UNKNOWN, UNPROBED, Verdict
from resilience.fuzz import engine, failure_kinds, speculation
from resilience.fuzz.judge import ScenarioFailed, failure_class
from resilience.fuzz.options import FuzzOptions
from resilience.runner.run import CaseResult
from resilience.runner.scenario import load_file

POWER_LOST = [{"load_job": 2, "crash_state": "state-1", "acknowledged": 2, "problem": "an acknowledged save was lost"}]
DELETED = [
    {
        "load_job": 2,
        "acknowledged": 2,
        "problem": "load failed although iteration 2 was reported saved",
        "culprits": [{"op": "unlink", "path": "step-2/.metadata", "rank": 0, "thread": "main"}],
    }
]


def _result(verdict, evidence=(), faults=(), checker="durability", combo="LEGACY/torch/sync"):
    verdicts = [Verdict(checker, verdict, "fake", list(evidence))]
    return CaseResult("s", combo, verdict, verdicts, 0.0, "/nowhere", "replay", f"{checker}: fake", faults=list(faults))


@pytest.mark.parametrize(
    "evidence, faults, kind",
    [
        (DELETED, [{"fault": "rank_kill rank=0", "status": "fired"}], "deleted"),  # the operation named wins
        ([{"culprits": [{"op": "rename"}]}], [], "renamed_over"),
        ([{"op": "create"}], [], "overwritten"),
        (POWER_LOST, [], "power_loss"),
        ([{"problem": "x"}], [{"fault": "lost_unsynced_writes rank=0", "status": "fired"}], "power_loss"),
        ([{"save_id": 1, "writing": 1, "problem": "reported done early"}], [], "early_return"),
        ([{"problem": "x"}], [{"fault": "rank_kill rank=0", "status": "fired"}], "crash"),
        ([{"problem": "x"}], [{"fault": "io_error rank=0", "status": "fired"}], "io_error"),
        ([{"problem": "x"}], [{"fault": "bit_flip rank=0", "status": "fired"}], "damage"),
        ([{"problem": "x"}], [{"fault": "rank_kill rank=0", "status": "never fired"}], "no_fault"),
    ],
)
def test_the_evidence_kind_comes_from_the_evidence_then_the_faults_that_fired(evidence, faults, kind):
    assert failure_kinds.evidence_kind(_result(FAIL, evidence, faults)) == kind
    assert kind in failure_kinds.EVIDENCE_KINDS


def test_two_evidence_kinds_of_one_checker_are_two_failure_classes():
    lost, deleted = failure_class(_result(FAIL, POWER_LOST)), failure_class(_result(FAIL, DELETED))
    assert lost.__name__ == "FailInDurabilityPowerLoss" and deleted.__name__ == "FailInDurabilityDeleted"
    assert lost is not deleted and issubclass(lost, ScenarioFailed) and issubclass(deleted, ScenarioFailed)
    assert (lost.checker, lost.evidence_kind) == ("durability", "power_loss")
    assert failure_class(_result(FAIL, POWER_LOST)) is lost  # the same class each time: Hypothesis compares them
    # an UNKNOWN's evidence is an error, not a finding: its checker alone names it
    assert failure_class(_result(UNKNOWN, checker="framework")).__name__ == "UnknownInFramework"


def test_an_unprobed_case_gives_short_reasons_for_its_gap():
    never = [{"fault": "rank_kill rank=1 nth=3 seed=0", "status": "never fired", "detail": "its trigger never came"}]
    assert failure_kinds.gap_reasons(_result(UNPROBED, faults=never, checker="faults")) == ["rank_kill: never fired"]
    saves = _result(UNPROBED, checker="saves")
    saves.verdicts = [Verdict("saves", UNPROBED, "none of 3 saves was acknowledged on every rank: EIO; nothing")]
    assert failure_kinds.gap_reasons(saves) == ["saves: none of N saves was acknowledged on every rank: EIO"]
    assert failure_kinds.gap_reasons(_result(FAIL, POWER_LOST)) == []


def _fake(monkeypatch, judge):
    """run_case replaced by `judge(scenario) -> (verdict, evidence, faults, checker)`."""

    def run_case(scenario, combo, case_dir, backend=None, **kw):
        os.makedirs(case_dir, exist_ok=True)
        verdict, evidence, faults, checker = judge(scenario)
        verdicts = [Verdict(checker, verdict, "fake", evidence)]
        detail = f"{checker}: fake"
        return CaseResult(scenario.name, str(combo), verdict, verdicts, 0.0, case_dir, "replay", detail, faults=faults)

    monkeypatch.setattr(speculation, "run_case", run_case)


def _kinds(scenario) -> list[str]:
    return [s.kind for s in scenario.steps]


def _saves(scenario) -> int:
    return sum(k == "save" for k in _kinds(scenario))


def test_a_fail_is_not_shrunk_into_an_unprobed_example(tmp_path, monkeypatch):
    """A crash fails durability when the scenario saves three times, and never fires with fewer: the smaller
    examples are UNPROBED, counted as gaps with their reason, and the minimal failure is still the FAIL."""

    def judge(scenario):
        crash = [{"fault": f"{s.fault.kind} x", "status": "fired"} for s in scenario.steps if s.kind == "crash"]
        if not crash:
            return PASS, [], [], "durability"
        if _saves(scenario) >= 3:
            return FAIL, POWER_LOST, crash, "durability"
        never = [dict(f, status="never fired", detail="its trigger never came") for f in crash]
        return UNPROBED, [], never, "faults"

    _fake(monkeypatch, judge)
    out = engine.fuzz(FuzzOptions(examples=80, seed=1, out=str(tmp_path), modes=("scenarios",)))
    (failure,) = out.failures
    assert failure.verdict == "FAIL" and failure.kind == "FailInDurabilityPowerLoss"
    minimal = load_file(failure.scenario_file)
    assert "crash" in _kinds(minimal) and _saves(minimal) >= 3
    assert out.unprobed > 0 and out.gaps == {"rank_crash: never fired": out.unprobed}
    report = json.load(open(os.path.join(out.run_dir, "fuzz.json")))
    assert report["gaps"] == {"unprobed": out.unprobed, "reasons": {"rank_crash: never fired": out.unprobed}}
    rows = json.load(open(os.path.join(out.run_dir, "results.json")))
    assert any(r["verdict"] == "UNPROBED" and r["phase"] == "shrinking" for r in rows)  # met, and passed by


def test_a_failure_shrinks_only_into_examples_failing_the_same_way(tmp_path, monkeypatch):
    """Once a power-loss FAIL is found, every other failing example (smaller ones included) fails by a
    deletion: Hypothesis would slip to the smaller one; the mode keeps shrinking the power loss, and counts
    the other class met on the way."""
    first: list = []  # the steps of the first failing example

    def judge(scenario):
        crash = [{"fault": f"{s.fault.kind} x", "status": "fired"} for s in scenario.steps if s.kind == "crash"]
        if not crash:
            return PASS, [], [], "durability"
        steps = [s.to_dict() for s in scenario.steps]
        first[:] = first or [steps]
        return FAIL, POWER_LOST if steps == first[0] else DELETED, crash, "durability"

    _fake(monkeypatch, judge)
    out = engine.fuzz(FuzzOptions(examples=30, seed=3, out=str(tmp_path), modes=("scenarios",)))
    (failure,) = out.failures
    assert failure.kind == "FailInDurabilityPowerLoss"
    assert [s.to_dict() for s in load_file(failure.scenario_file).steps] == first[0]
    assert out.passed_over["scenarios"]["FailInDurabilityDeleted"] > 0


def test_all_bugs_tells_two_evidence_kinds_of_one_checker_apart(tmp_path, monkeypatch):
    """A crash loses the save by a power loss, a corruption by a deletion: the same checker, two bugs, each
    shrunk and kept on its own."""

    def judge(scenario):
        kinds = _kinds(scenario)
        if "crash" in kinds:
            return FAIL, POWER_LOST, [{"fault": "lost_unsynced_writes x", "status": "fired"}], "durability"
        if "corrupt" in kinds:
            return FAIL, DELETED, [{"fault": "delete_file x", "status": "fired"}], "durability"
        return PASS, [], [], "durability"

    _fake(monkeypatch, judge)
    out = engine.fuzz(FuzzOptions(examples=30, seed=3, out=str(tmp_path), modes=("scenarios",), all_bugs=True))
    assert sorted(f.kind for f in out.failures) == ["FailInDurabilityDeleted", "FailInDurabilityPowerLoss"]
    for f in out.failures:
        kinds = _kinds(load_file(f.scenario_file))
        assert ("crash" in kinds) == (f.kind == "FailInDurabilityPowerLoss")
