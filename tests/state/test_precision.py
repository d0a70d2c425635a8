"""A resume in another precision: the state's own conversion (what the reference loads through) agrees with
the runner's independent one, loses nothing, and a transition names each side's dtype."""

from __future__ import annotations

from dataclasses import replace

import pytest
import torch

from resilience.errors import ConfigError
from resilience.runner.oracle import _NO_GROUPS, convert, local_fingerprint, precision_change
from resilience.state import ModelSpec, Topology, TrainingState, Transition
from resilience.state.sharding import ShardedTensor

SPEC = ModelSpec(
    num_layers=2, hidden=16, ffn_hidden=32, vocab=37, make_vocab_size_divisible_by=5, optimizer="distributed"
)


def _trained(dtype: str, steps: int = 4) -> TrainingState:
    state = TrainingState(replace(SPEC, dtype=dtype), Topology(), 0, groups=_NO_GROUPS)  # type: ignore[arg-type]
    state.train(steps)
    return state


def _load_through_records(source: TrainingState, dtype: str) -> TrainingState:
    """What a loader does: fill the records a checkpoint of `source` holds, then convert."""
    target = TrainingState(replace(SPEC, dtype=dtype), Topology(), 0, groups=_NO_GROUPS)  # type: ignore[arg-type]
    records, finish = target.records_in_dtype(source.spec.dtype)
    saved = {r.key: r for r in source.sharded_state_dict()}
    assert {r.key for r in records} == set(saved)  # exactly what the checkpoint holds, nothing more
    for r in records:
        if isinstance(r, ShardedTensor):
            assert r.data.dtype == saved[r.key].data.dtype
            r.data.copy_(saved[r.key].data)
    target.load_objects({r.key: r.value for r in source.sharded_state_dict() if not isinstance(r, ShardedTensor)})
    finish()
    return target


@pytest.mark.parametrize("saved, loaded", [("fp32", "bf16"), ("bf16", "fp32")])
def test_the_states_conversion_is_the_runners_exact_one(saved, loaded):
    source = _trained(saved)
    loaded_state = _load_through_records(source, loaded)
    exact = convert(source, loaded, exact=True)
    keep = {k: v for k, v in local_fingerprint(exact).items() if k != "rng"}
    assert {k: v for k, v in local_fingerprint(loaded_state).items() if k != "rng"} == keep
    fp32 = source.params if saved == "fp32" else source.main
    got = loaded_state.main if loaded == "bf16" else loaded_state.params
    for key in fp32:  # not a bit lost: the fp32 values are all there
        assert torch.equal(got[key], fp32[key]), key


def test_the_cast_loses_what_bf16_cannot_hold():
    targets = precision_change(replace(SPEC, dtype="fp32"))(4, "bf16", "fp32")
    assert targets.exact != targets.cast
    assert "fp32 parameters changed, relative error up to" in targets.lost
    assert targets.after("exact", 6) != targets.after("cast", 6)


def test_a_transition_names_each_sides_dtype():
    t = Transition.parse("tp1pp1dp2:bf16->tp2pp1dp1:fp32")
    assert (t.save_dtype, t.load_dtype, t.changed, t.precision_changed) == ("bf16", "fp32", ("tp", "dp"), True)
    assert str(t) == "tp1pp1dp2:bf16->tp2pp1dp1:fp32" and Transition.parse(str(t)) == t
    assert not Transition.parse("tp1pp1dp1->tp2pp1dp1").precision_changed
    for bad in ("tp1pp1dp1:fp16->tp1pp1dp1:fp32", "tp1pp1dp1:bf16->tp1pp1dp1"):
        with pytest.raises(ConfigError):
            Transition.parse(bad)
