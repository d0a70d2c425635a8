"""The megatron-core adapter (optional extra [megatron]): skipped when megatron-core is not installed."""
from __future__ import annotations

import pytest
import torch

from resilience.backends.megatron import available

pytestmark = pytest.mark.skipif(not available(), reason="megatron-core is not installed (pip install '.[megatron]')")


def test_cpu_shim_changes_two_functions_and_restores_them():
    from resilience.backends.megatron import megatron_calls
    if torch.cuda.is_available():
        pytest.skip("the shim does nothing where CUDA is available")
    sync, current = torch.cuda.synchronize, torch.cuda.current_device
    with megatron_calls():
        assert torch.cuda.synchronize() is None
        assert torch.tensor([1], device=torch.cuda.current_device()).device.type == "cpu"
        import multiprocessing
        assert not multiprocessing.current_process().daemon
    assert (torch.cuda.synchronize, torch.cuda.current_device) == (sync, current)


@pytest.mark.multiprocess
@pytest.mark.parametrize("combo", ["GLOBAL/torch_dist/sync", "GLOBAL/torch_dist/async"])
def test_resharding_round_trip(tmp_path, combo):
    """tp2pp2dp1 -> tp1pp2dp2 through megatron-core: exact, including the padded vocabulary."""
    from resilience.checkpoint import Combination
    from resilience.runner.matrix import transition_scenario
    from resilience.runner.run import run_case
    result = run_case(transition_scenario("tp+pp+dp", "tp2pp2dp1->tp1pp2dp2", 0), Combination.parse(combo),
                      str(tmp_path), backend="megatron")
    assert result.verdict == "PASS", result.detail
