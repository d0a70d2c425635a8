"""The matrix's expert columns on the reference, with real ranks: GLOBAL and TORCH_DCP reshard experts across
ep, etp and a change of tp, dp and ep at once bit-exact; LEGACY loads a dp change with tp > ep x etp (a file
per place of the expert grid) and refuses an ep change naming it; LOCAL refuses."""

from __future__ import annotations

import pytest

from resilience.runner.matrix import MOE, MOE_COLUMNS, TRANSITIONS, transition_scenario
from resilience.runner.run import run_case
from resilience.vocab.combos import Combination

pytestmark = pytest.mark.multiprocess


def _run(tmp_path, column: str, combo: str):
    scenario = transition_scenario(column, TRANSITIONS[column], 0)
    assert scenario.model == MOE and MOE.num_experts
    return run_case(scenario, Combination.parse(combo), str(tmp_path))


@pytest.mark.parametrize(
    "column, combo",
    [
        ("ep", "GLOBAL/torch_dist/sync"),
        ("etp", "GLOBAL/torch_dist/async"),
        ("moe", "GLOBAL/torch_dist/sync"),
        ("ep", "TORCH_DCP/torch_dcp/async"),
        ("etp", "TORCH_DCP/torch_dcp/sync"),
        ("moe", "TORCH_DCP/torch_dcp/sync"),
        ("moe-dp", "LEGACY/torch/sync"),
    ],
)
def test_experts_reshard_bit_exact(tmp_path, column, combo):
    result = _run(tmp_path, column, combo)
    verdicts = {v.checker: v.status for v in result.verdicts}
    assert result.verdict == "PASS", f"{result.detail}\nreplay: {result.replay}"
    assert verdicts["resume_equivalence"] == "PASS" and verdicts["topology_independence"] == "PASS", verdicts


@pytest.mark.parametrize("combo, named", [("LEGACY/torch/sync", "ep 2 -> 1"), ("LOCAL/torch/sync", "tp1pp1dp2ep2")])
def test_an_expert_layout_change_is_refused_clearly(tmp_path, combo, named):
    result = _run(tmp_path, "ep", combo)
    assert result.verdict == "REFUSED-AS-EXPECTED", f"{result.detail}\nreplay: {result.replay}"
    (row,) = next(v.evidence for v in result.verdicts if v.checker == "topology_independence")
    assert row["measured"] == "REFUSED-CLEARLY" and named in row["error"], row


def test_every_expert_column_runs_on_the_model_with_experts():
    assert set(MOE_COLUMNS) <= set(TRANSITIONS)
    explicit = transition_scenario("x", "tp1pp1dp2ep2->tp1pp1dp2", 0)  # a user's own: it splits experts
    assert explicit.model.num_experts
