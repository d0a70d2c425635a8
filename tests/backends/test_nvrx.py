"""The NVIDIA Resiliency Extension adapter (optional extra [nvrx]): the tests that need the library skip
cleanly without it; naming the backend without it is one clear error."""

from __future__ import annotations

import pytest
import torch

from resilience.backends.nvrx import available
from resilience.errors import ConfigError
from resilience.runner.adapters import keep_last_of, make_backend, supported_combinations
from resilience.vocab import Combination

LOCAL = Combination.parse("LOCAL/torch/sync")
NOT_INSTALLED = "nvidia-resiliency-ext is not installed (pip install '.[nvrx]')"
needs_nvrx = pytest.mark.skipif(not available(), reason=NOT_INSTALLED)


def test_declarations_read_without_the_library():
    assert [str(c) for c in supported_combinations("nvrx")] == ["LOCAL/torch/sync"]
    assert keep_last_of("nvrx") == 1
    assert keep_last_of("dcp") is None and keep_last_of("reference") is None


def bad_keep_last(combo):
    raise AssertionError("never made")


bad_keep_last.keep_last = 0  # type: ignore[attr-defined]


def test_a_keep_last_that_is_not_a_count_is_one_clear_error():
    with pytest.raises(ConfigError, match="keep_last: must be a positive integer, got 0"):
        keep_last_of(f"{__name__}:bad_keep_last")


@needs_nvrx
def test_other_combinations_and_options_are_refused_with_the_reason():
    with pytest.raises(ConfigError, match="async save needs CUDA"):
        make_backend("nvrx", Combination.parse("GLOBAL/torch_dist/async"))
    with pytest.raises(ConfigError, match="option replication='ring' is not allowed"):
        make_backend("nvrx:replication=ring", LOCAL)


@needs_nvrx
def test_state_dict_pops_inserts_and_inits_its_tensors():
    from nvidia_resiliency_ext.checkpointing.local.base_state_dict import TensorAwareStateDict

    from resilience.backends.nvrx import RecordsStateDict

    w = torch.arange(6.0).reshape(2, 3)
    sd = RecordsStateDict({"w": w, "b": torch.ones(2, dtype=torch.bfloat16)}, {"iteration": 3}, {"tp": 1})
    assert isinstance(sd, TensorAwareStateDict)
    sd.copy_tensors_to_cpu()
    w.add_(1)  # a save must hold the state as it was when it was called
    popped = sd.pop_tensors()
    assert sd.is_hollow and torch.equal(popped[0], torch.arange(6.0).reshape(2, 3))
    sd.insert_tensors(popped)
    assert not sd.is_hollow and list(sd.tensors_by_key) == ["w", "b"]
    sd.pop_tensors()
    sd.init_tensors()
    assert [tuple(t.shape) for t in sd.tensors] == [(2, 3), (2,)]
    assert [t.dtype for t in sd.tensors] == [torch.float32, torch.bfloat16]


@needs_nvrx
@pytest.mark.multiprocess
@pytest.mark.parametrize("spec", ["nvrx", "nvrx:replication=clique"])
def test_adapter_check_finds_no_problem(capsys, spec):
    """Real ranks on gloo: save, list, load bit-exact, refuse another topology, learn the layout."""
    from resilience.cli import main

    code = main(["adapter", "check", spec])
    out = " ".join(capsys.readouterr().out.split())
    assert code == 0, out
    assert "list_checkpoints iteration 3 (complete)" in out  # NVRx removed iteration 2 after saving 3
    assert "load on tp2pp1dp1 iteration 3 bit-exact, RNG restored" in out
    assert "load on tp1pp1dp2 refused clearly (TopologyChangeRefused:" in out
    files = 4 if "clique" in spec else 2  # with replication each rank keeps its neighbour's file too
    assert f"files per save {files}: 0/iter_{{iteration:07d}}_0_local.pt (data)" in out


def test_no_iteration_every_rank_holds_is_not_found_naming_the_holders():
    """NVRx's answer when files were lost and when the job has more ranks than the saver alike."""
    from resilience.backends.nvrx import NvrxLocalBackend
    from resilience.errors import CheckpointNotFound

    with pytest.raises(CheckpointNotFound, match="no NVRx local checkpoint on any rank"):
        NvrxLocalBackend._nothing_to_load("/ckpt", [[], []])
    held = [[(3, 0, ""), (2, 0, "")], [(2, 1, "")]]
    with pytest.raises(CheckpointNotFound, match=r"all 1 ranks hold \(held: 2: ranks \[0, 1\], 3: ranks \[0\]\)"):
        NvrxLocalBackend._nothing_to_load("/ckpt", held)
