"""A power loss armed while an async save is still being written (through the storage seam): the crash
states are built from every operation of the job over a snapshot taken before its first, so the writer's
files are whole in the log and a correct implementation passes. Judged from a snapshot taken at arming, half
of that save was in neither, and the reference failed durability on a state no disk could be in."""

import pytest

from resilience.runner.run import run_case
from resilience.runner.scenario import load_text
from resilience.vocab.combos import Combination

pytestmark = pytest.mark.multiprocess

# the fuzzer's minimal scenario: a re-save of iteration 9,999,999 whose writer is still at work when the power
# loss is armed at the next save's staging
SCENARIO = """
name: power-loss-during-async-write
topology: tp1pp1dp1
model:
  {num_layers: 1, hidden: 1, ffn_hidden: 1, heads: 1, vocab: 1, make_vocab_size_divisible_by: 1, optimizer: adam,
   global_batch_size: 1, rampup_samples: 16, skip_every: 3, value_range: wide, start_iteration: 9999998,
   sized_params: {one_row: 1, past_4k: 1025}, padding_values: true}
steps:
  - train: 1
  - save
  - save
  - lose_unsynced: {rank: 0, phase: staging, max_states: 1}
  - save
"""


def test_a_power_loss_armed_during_an_async_write_is_judged_from_every_operation(tmp_path):
    result = run_case(
        load_text(SCENARIO, "power-loss.yaml"), Combination.parse("GLOBAL/torch_dist/async"), str(tmp_path)
    )
    verdicts = {v.checker: v.status.value for v in result.verdicts}
    assert result.verdict == "PASS", f"{result.detail}\nreplay: {result.replay}"
    assert verdicts["durability"] == "PASS", verdicts  # the crash state was loaded and judged, not skipped
