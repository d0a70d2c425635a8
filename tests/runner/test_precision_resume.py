"""A resume in another precision on the reference, with real ranks: the distributed optimizer's fp32 main
parameters split unevenly over dp 2, loaded exactly in both directions, and training on as from the exact
conversion."""

from __future__ import annotations

import pytest

from resilience.runner.matrix import TRANSITIONS, transition_scenario
from resilience.runner.run import run_case
from resilience.vocab.combos import Combination

pytestmark = pytest.mark.multiprocess


@pytest.mark.parametrize("column", ["to-fp32", "to-bf16"])
@pytest.mark.parametrize("combo", ["GLOBAL/torch_dist/sync", "LEGACY/torch/sync"])
def test_the_reference_loads_a_precision_change_exactly(tmp_path, combo, column):
    result = run_case(transition_scenario(column, TRANSITIONS[column], 0), Combination.parse(combo), str(tmp_path))
    verdicts = {v.checker: v for v in result.verdicts}
    assert result.verdict == "PASS", f"{result.detail}\nreplay: {result.replay}"
    assert "LOADED-EXACT" in verdicts["precision"].detail
    assert verdicts["resume_equivalence"].status == "N/A"  # values in another dtype are the precision checker's


@pytest.mark.parametrize("column, measured", [("optim-to-bf16", "LOADED-CAST"), ("optim-to-fp32", "LOADED-EXACT")])
def test_the_reference_says_when_optimizer_moments_lose_precision(tmp_path, column, measured):
    """fp32 moments rounded into bf16 ones lose what no conversion keeps: the reference says so and passes;
    bf16 moments upcast lose nothing."""
    result = run_case(
        transition_scenario(column, TRANSITIONS[column], 0), Combination.parse("GLOBAL/torch_dist/sync"), str(tmp_path)
    )
    verdicts = {v.checker: v for v in result.verdicts}
    assert result.verdict == "PASS", f"{result.detail}\nreplay: {result.replay}"
    assert measured in verdicts["precision"].detail
    if measured == "LOADED-CAST":
        assert "optimizer moments changed" in verdicts["precision"].detail
        (row,) = verdicts["precision"].evidence
        assert "saved in fp32, rounded into bf16: precision lost" in row["warned"][0]


@pytest.mark.parametrize(
    "factory, column, heard",
    [
        ("warns", "to-fp32", "rank 1: warning UserWarning: ckpt: casting parameters from bf16 to fp32"),
        ("logs", "optim-to-bf16", "rank 1: log WARNING ckpt.optim: exp_avg stored as float32, loaded as bfloat16"),
    ],
)
def test_a_cast_said_on_one_other_rank_only_is_loaded_cast(tmp_path, factory, column, heard):
    """A library that warns (warnings.warn, or a log record) on rank 1 alone: the load is LOADED-CAST."""
    result = run_case(
        transition_scenario(column, TRANSITIONS[column], 0),
        Combination.parse("GLOBAL/torch_dist/sync"),
        str(tmp_path),
        backend=f"tests.runner.warning_casts:{factory}",
    )
    verdicts = {v.checker: v for v in result.verdicts}
    assert result.verdict == "PASS", f"{result.detail}\nreplay: {result.replay}"
    (row,) = verdicts["precision"].evidence
    assert row["measured"] == "LOADED-CAST" and row["warned"] == [heard], row
