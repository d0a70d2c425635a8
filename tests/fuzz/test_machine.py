"""The lifecycle state machine: every scenario it builds validates, a planted bug comes out as a short
replayable sequence, and a real run on ranks passes with the reference implementation."""

import textwrap

import pytest
from hypothesis import HealthCheck, Phase, settings
from hypothesis.stateful import run_state_machine_as_test

import resilience.strategies as rst
from resilience.checkers import FAIL, PASS, Verdict
from resilience.runner.plan import plan_jobs
from resilience.runner.run import CaseResult
from resilience.runner.scenario import load_text

FAST = settings(
    max_examples=30,
    stateful_step_count=8,
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=list(HealthCheck),
    phases=[p for p in Phase if p is not Phase.explain],
)


def _result(scenario, combo, verdict, detail="") -> CaseResult:
    return CaseResult(
        scenario.name,
        str(combo),
        verdict,
        [Verdict("integrity", verdict, detail)],
        0.0,
        "<none>",
        f"resilience run <case>/scenario.yaml --combos {combo}",
        detail,
    )


def test_every_judged_scenario_validates_and_plans():
    judged = []

    def record(scenario, combo):
        again = load_text(scenario.to_yaml(), "<round trip>")
        assert again.to_dict() == scenario.to_dict() and scenario.combinations == [combo]
        assert plan_jobs(scenario, combo)
        judged.append(scenario)
        return _result(scenario, combo, PASS)

    machine = rst.lifecycle_machine(max_world=4, judge_with=record)
    run_state_machine_as_test(machine, settings=FAST)
    assert judged, "the machine never judged a scenario"
    kinds = {step.kind for s in judged for step in s.steps}
    assert {"train", "save", "resume"} <= kinds and kinds & {"crash", "fault", "corrupt", "lose_unsynced"}


def test_the_machine_changes_precision_only_once_saving_is_over():
    judged = []

    def record(scenario, combo):
        load_text(scenario.to_yaml(), "<round trip>")  # the loader refuses a save after a precision change
        assert plan_jobs(scenario, combo)
        judged.append(scenario)
        return _result(scenario, combo, PASS)

    machine = rst.lifecycle_machine(max_world=2, faults=(), precision_changes=True, judge_with=record)
    run_state_machine_as_test(machine, settings=FAST)
    changed = [st.args["precision"] for s in judged for st in s.steps if st.kind == "resume" and "precision" in st.args]
    assert changed, "the machine never changed precision"


def test_a_planted_bug_prints_as_a_short_replayable_sequence():
    def judge(scenario, combo):
        if any(step.kind == "corrupt" and step.args.get("kind") == "bitflip" for step in scenario.steps):
            result = _result(scenario, combo, FAIL, "integrity: wrong values after a bit flip")
            raise rst.ScenarioFailed(scenario, result)
        return _result(scenario, combo, PASS)

    machine = rst.lifecycle_machine(
        combinations=["GLOBAL/torch_dist/sync"],
        max_world=2,
        faults=["bit_flip", "truncate", "rank_crash"],
        judge_with=judge,
    )
    with pytest.raises(rst.ScenarioFailed) as e:
        run_state_machine_as_test(machine, settings=settings(FAST, max_examples=200))
    text = str(e.value)
    assert "FAIL: scenario 'lifecycle' with GLOBAL/torch_dist/sync" in text and "replay: resilience run" in text
    steps = [s.to_dict() for s in e.value.scenario.steps]
    assert {"corrupt": {"kind": "bitflip", "rank": 0, "seed": 0}} in steps and len(steps) <= 4, steps
    printed = textwrap.dedent(text.split("\nscenario:\n", 1)[1].split("\n\nreplay:")[0])
    assert load_text(printed).to_dict() == e.value.scenario.to_dict()  # the printed scenario replays


@pytest.mark.multiprocess
def test_the_reference_keeps_every_invariant_on_real_ranks():
    verdicts = []

    def judge(scenario, combo):
        result = rst.judge(scenario, combo)  # real ranks; raises ScenarioFailed on FAIL or UNKNOWN
        verdicts.append(result.verdict)
        return result

    machine = rst.lifecycle_machine(
        combinations=["LEGACY/torch/sync", "GLOBAL/torch_dist/async"],
        max_world=2,
        faults=["rank_crash", "truncate", "delete_file"],
        judge_with=judge,
    )
    run_state_machine_as_test(machine, settings=settings(FAST, max_examples=3, stateful_step_count=5))
    assert verdicts and "PASS" in verdicts, verdicts
