"""A rank stopped for good (SIGSTOP, never continued) ends the job at its timeout and the case in UNKNOWN."""

import pytest

from resilience.runner.run import run_case
from resilience.runner.scenario import load_text
from resilience.vocab.combos import Combination

pytestmark = pytest.mark.multiprocess

STOPPED = """
name: stopped-for-good
topology: tp2pp1dp1
timeout: 5
steps:
  - train: 1
  - kill: {kind: rank_hang, rank: 1, path: "*iter_0000001*", size: 1}
  - save
"""


def test_a_rank_stopped_for_good_is_unknown_with_the_reason(tmp_path):
    s = load_text(STOPPED, "s.yaml")
    result = run_case(s, Combination.parse("LEGACY/torch/sync"), str(tmp_path / "case"))
    assert result.verdict == "UNKNOWN", result.to_row()
    assert "rank 1 was stopped (SIGSTOP" in result.detail, result.to_row()
    run = [v for v in result.verdicts if v.checker == "run"]
    assert run and run[0].evidence[0]["rank"] == 1
