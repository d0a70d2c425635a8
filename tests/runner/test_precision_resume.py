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
