"""Recovery: after a save that raised, the same ranks load, save, finalize and load back. The reference
recovers (PASS naming the iteration saved and loaded back); broken:poisoned_after_error, whose failed save
leaves its 'in progress' flag set, FAILs recovery and no other checker; a kill is N/A."""

import pytest

from resilience.checkers import FAIL, NA, PASS
from resilience.runner.run import run_case
from resilience.runner.scenario import load_text
from resilience.vocab.combos import Combination

pytestmark = pytest.mark.multiprocess

# world 2, a small model: rank 1's first write of the second save fails with a full disk, then the job
# recovers in the same processes
SCENARIO = """
name: recover-after-enospc
topology: tp2pp1dp1
combinations: [{combo}]
model: {{num_layers: 1, hidden: 16, ffn_hidden: 32, heads: 2, vocab: 32}}
steps:
  - train: 1
  - save
  - finalize
  - train: 1
  - {fault}
  - save
  - recover
"""
ENOSPC = "fault: {kind: io_error, rank: 1, errno: ENOSPC, op: write, path: '@data'}"


def _case(tmp_path, combo: str, backend: str = "reference", fault: str = ENOSPC):
    scenario = load_text(SCENARIO.format(combo=combo, fault=fault))
    result = run_case(scenario, Combination.parse(combo), str(tmp_path / "case"), backend=backend)
    return result, {v.checker: v for v in result.verdicts}


@pytest.mark.parametrize("combo", ["GLOBAL/torch_dist/sync", "GLOBAL/torch_dist/async"])
def test_the_reference_recovers_after_a_full_disk(tmp_path, combo):
    result, by = _case(tmp_path, combo)
    assert by["recovery"].status == PASS, by["recovery"]
    assert "saved iteration 3" in by["recovery"].detail and "loaded it back equal" in by["recovery"].detail
    (done,) = by["recovery"].evidence
    assert done["saved_iteration"] == done["loaded_iteration"] == 3
    assert result.verdict == PASS, result.detail


def test_a_save_poisoned_by_the_failed_one_fails_recovery_only(tmp_path):
    result, by = _case(tmp_path, "GLOBAL/torch_dist/sync", backend="broken:poisoned_after_error")
    assert by["recovery"].status == FAIL, by["recovery"]
    assert "the next save 0.3 (iteration 3) raised" in by["recovery"].detail
    assert "already in progress" in by["recovery"].detail
    assert [c for c, v in by.items() if v.status == FAIL] == ["recovery"]


def test_a_killed_rank_is_no_fault_survived(tmp_path):
    crash = "crash: {rank: 1, after_bytes: 64, file: '@data'}"
    result, by = _case(tmp_path, "GLOBAL/torch_dist/sync", fault=crash)
    assert by["recovery"].status == NA and "killed" in by["recovery"].detail, by["recovery"]
    assert result.verdict == PASS, result.detail
