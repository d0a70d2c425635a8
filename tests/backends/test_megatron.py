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
@pytest.mark.slow
@pytest.mark.parametrize("combo", ["GLOBAL/torch_dist/sync", "GLOBAL/torch_dist/async"])
def test_resharding_round_trip(tmp_path, combo):
    """tp2pp2dp1 -> tp1pp2dp2 through megatron-core: exact, including the padded vocabulary."""
    from resilience.runner.matrix import transition_scenario
    from resilience.runner.run import run_case
    from resilience.vocab import Combination

    result = run_case(
        transition_scenario("tp+pp+dp", "tp2pp2dp1->tp1pp2dp2", 0),
        Combination.parse(combo),
        str(tmp_path),
        backend="megatron",
    )
    assert result.verdict == "PASS", result.detail


@pytest.mark.multiprocess
def test_interop_reference_to_megatron(tmp_path):
    """Measured (docs/findings.md): megatron-core's loader cannot read the reference's torch_dist folder
    (no common.pt; objects stored bare where megatron stores one-element lists), its tensors it can."""
    from resilience.state import Topology
    from tests.backends.interop import interop

    result = interop("reference", "megatron", str(tmp_path), Topology(2, 1, 1), Topology(1, 1, 2))
    assert not result["ok"]
    assert "dist_checkpointing.load" in result["steps"][0]
    assert "object of type 'int' has no len()" in result["steps"][1]
    assert result["tensors_exact"]


@pytest.mark.multiprocess
def test_interop_megatron_to_reference(tmp_path):
    """Measured: the reference refuses a folder without its manifest; its torch_dist reader reads the
    tensors exactly, and the objects once taken out of megatron's one-element lists."""
    from resilience.state import Topology
    from tests.backends.interop import interop

    result = interop("megatron", "reference", str(tmp_path), Topology(2, 1, 1), Topology(1, 1, 2))
    assert result["ok"] and result["exact"] and result["tensors_exact"], result
    assert result["steps"][0].startswith("ReferenceBackend.load refused")
    assert "objects as ['list']" in result["steps"][1]


def test_the_tracker_is_read_as_megatron_lm_reads_it(tmp_path):
    from resilience.backends.megatron import tracked_folder
    from resilience.errors import CheckpointNotFound, IntegrityError

    with pytest.raises(CheckpointNotFound, match="start from scratch"):
        tracked_folder(str(tmp_path))
    tracker = tmp_path / "latest_checkpointed_iteration.txt"
    for text, found in (("12\n", (12, str(tmp_path / "iter_0000012"))), ("release", (0, str(tmp_path / "release")))):
        tracker.write_text(text)
        assert tracked_folder(str(tmp_path)) == found
    for text, why in (("0", "assert iteration > 0 or release"), ("garbage", "Invalid metadata file")):
        tracker.write_text(text)
        with pytest.raises(IntegrityError, match=why):
            tracked_folder(str(tmp_path))


def _load_with_a_stale_tracker_on_rank_1(ctx, root: str) -> dict:
    """Save iterations 2 and 3; rank 1 then reads the tracker as it was before rank 0 rewrote it."""
    from resilience.backends import megatron
    from resilience.state import ModelSpec, Topology, TrainingState, fingerprint
    from resilience.vocab import Combination

    spec, topo = ModelSpec(num_layers=2, hidden=16, ffn_hidden=32, heads=2, vocab=50), Topology(2, 1, 1)
    backend = megatron.MegatronBackend(Combination.parse("GLOBAL/torch_dist/sync"))
    state = TrainingState(spec, topo, ctx.rank)
    for _ in range(2):
        state.train(1 if state.iteration else 2)
        backend.save(state, root)
    saved = fingerprint(state.sharded_state_dict())
    if ctx.rank == 1:
        megatron._tracker_text = lambda root: "2"  # this rank's stale view of the file
    fresh = TrainingState(spec, topo, ctx.rank)
    result = backend.load(fresh, root)
    return {"iteration": result.iteration, "same": fingerprint(fresh.sharded_state_dict()) == saved}


@pytest.mark.multiprocess
def test_every_rank_loads_the_newest_iteration_any_rank_read_as_megatron_lm_does(tmp_path):
    """Megatron-LM's read_metadata all-reduces the tracker's iteration (max): a rank that read the file
    before rank 0 rewrote it loads the newer save with the others, not a mix of two saves."""
    from resilience.launch import run_ranks

    results = run_ranks(_load_with_a_stale_tracker_on_rank_1, 2, args=(str(tmp_path),), timeout=120)
    assert results == [{"iteration": 3, "same": True}] * 2
