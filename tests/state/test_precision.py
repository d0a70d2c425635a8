"""A resume in another precision: the state's own conversion (what the reference loads through) agrees with
the runner's independent one and loses nothing it can keep (the parameters' fp32 values; fp32 optimizer
moments rounded into bf16 are the one loss), and a transition names each side's precision."""

from __future__ import annotations

from dataclasses import replace

import pytest
import torch

from resilience.errors import ConfigError
from resilience.runner.oracle import convert, local_fingerprint, precision_change
from resilience.state import ModelSpec, ParallelGroups, Topology, TrainingState, Transition
from resilience.state.precision import Precision
from resilience.state.sharding import ShardedTensor

SPEC = ModelSpec(
    num_layers=2, hidden=16, ffn_hidden=32, vocab=37, make_vocab_size_divisible_by=5, optimizer="distributed"
)


def _trained(precision: str, steps: int = 4) -> TrainingState:
    state = TrainingState(SPEC.in_precision(precision), Topology(), 0, groups=ParallelGroups.without_collectives())
    state.train(steps)
    return state


def _load_through_records(source: TrainingState, precision: str) -> TrainingState:
    """What a loader does: fill the records a checkpoint of `source` holds, then convert."""
    target = TrainingState(SPEC.in_precision(precision), Topology(), 0, groups=ParallelGroups.without_collectives())
    records, finish = target.records_in_precision(source.spec.precision)
    saved = {r.key: r for r in source.sharded_state_dict()}
    assert {r.key for r in records} == set(saved)  # exactly what the checkpoint holds, nothing more
    for r in records:
        if isinstance(r, ShardedTensor):
            assert r.data.dtype == saved[r.key].data.dtype
            r.data.copy_(saved[r.key].data)
    target.load_objects({r.key: r.value for r in source.sharded_state_dict() if not isinstance(r, ShardedTensor)})
    finish()
    return target


PRECISION_CHANGES = [
    ("fp32", "bf16"),
    ("bf16", "fp32"),
    ("fp32", "fp32+optim_bf16"),
    ("fp32+optim_bf16", "fp32"),
    ("bf16+optim_bf16", "fp32"),
]


@pytest.mark.parametrize("saved, loaded", PRECISION_CHANGES)
def test_the_states_conversion_is_the_runners_exact_one(saved, loaded):
    source = _trained(saved)
    loaded_state = _load_through_records(source, loaded)
    exact = convert(source, loaded, exact=True)
    keep = {k: v for k, v in local_fingerprint(exact).items() if k != "rng"}
    assert {k: v for k, v in local_fingerprint(loaded_state).items() if k != "rng"} == keep
    fp32 = source.params if source.spec.dtype == "fp32" else source.main
    got = loaded_state.main if loaded_state.spec.dtype == "bf16" else loaded_state.params
    for key in fp32:  # not a bit of a parameter lost: the fp32 values are all there
        assert torch.equal(got[key], fp32[key]), key
    for key, m in source.exp_avg.items():  # moments: the same, or rounded to nearest into bf16
        assert torch.equal(loaded_state.exp_avg[key], m.to(loaded_state.exp_avg[key].dtype)), key


def test_bf16_moments_are_rounded_after_every_step():
    fp32, bf16 = _trained("fp32"), _trained("fp32+optim_bf16")
    key = next(iter(fp32.exp_avg))
    assert bf16.exp_avg[key].dtype == bf16.exp_avg_sq[key].dtype == torch.bfloat16
    assert fp32.exp_avg[key].dtype == torch.float32
    assert not torch.equal(bf16.params[key], fp32.params[key])  # the rounding shows in the training itself
    assert all(m.dtype == torch.float32 for m in bf16.main.values())


def test_the_cast_loses_what_bf16_cannot_hold():
    targets = precision_change(replace(SPEC, dtype="fp32"))(4, "bf16", "fp32")
    assert targets.exact != targets.cast
    assert "fp32 parameters changed, relative error up to" in targets.lost
    assert targets.after("exact", 6) != targets.after("cast", 6)


def test_fp32_moments_into_bf16_lose_precision_even_exactly():
    targets = precision_change(SPEC)(4, "fp32", "fp32+optim_bf16")
    assert targets.exact == targets.cast  # no conversion keeps fp32 moments in bf16 ones
    assert "optimizer moments changed, relative error up to" in targets.unavoidable
    back = precision_change(SPEC)(4, "fp32+optim_bf16", "fp32")
    assert back.exact == back.cast and not back.unavoidable  # every bf16 moment is an fp32 value
    both = precision_change(SPEC)(4, "fp32", "bf16+optim_bf16")
    assert both.exact != both.cast and "optimizer moments" in both.unavoidable
    assert "fp32 main parameters changed" in both.lost and "fp32 main parameters" not in both.unavoidable


def test_a_transition_names_each_sides_precision():
    t = Transition.parse("tp1pp1dp2:bf16->tp2pp1dp1:fp32")
    assert (t.save_precision, t.load_precision, t.changed, t.precision_changed) == (
        Precision("bf16"),
        Precision("fp32"),
        ("tp", "dp"),
        True,
    )
    assert str(t) == "tp1pp1dp2:bf16->tp2pp1dp1:fp32" and Transition.parse(str(t)) == t
    assert not Transition.parse("tp1pp1dp1->tp2pp1dp1").precision_changed
    optim = Transition.parse("tp1pp1dp2:fp32->tp1pp1dp2:FP32+optim_bf16")
    assert optim.load_precision == Precision("fp32", "bf16") and optim.precision_changed
    assert str(optim) == "tp1pp1dp2:fp32->tp1pp1dp2:fp32+optim_bf16"
    # an explicit fp32 optimizer state is the default one
    assert not Transition.parse("tp1pp1dp1:bf16+optim_fp32->tp1pp1dp1:bf16").precision_changed
    for bad in ("tp1pp1dp1:fp16->tp1pp1dp1:fp32", "tp1pp1dp1:bf16->tp1pp1dp1"):
        with pytest.raises(ConfigError):
            Transition.parse(bad)


@pytest.mark.parametrize(
    "bad",
    ["fp32+optim-bf16", "fp32+bf16", "optim_bf16", "fp32+optimizer_bf16", "fp32+optim_fp16", "fp32,optim=bf16", ""],
)
def test_a_misspelt_precision_is_one_error_naming_the_spelling(bad):
    with pytest.raises(ConfigError) as e:
        Transition.parse(f"tp1pp1dp2:fp32->tp1pp1dp2:{bad}")
    assert str(e.value).count("\n") == 0
    assert f"cannot read precision {bad!r}" in str(e.value) and "PARAMS+optim_OPTIM" in str(e.value)
    with pytest.raises(ConfigError, match="PARAMS\\+optim_OPTIM"):
        Precision.parse(bad)


def test_a_model_spec_carries_the_optimizer_states_dtype():
    spec = SPEC.in_precision("bf16+optim_bf16")
    assert (spec.dtype, spec.optim_dtype, str(spec.precision)) == ("bf16", "bf16", "bf16+optim_bf16")
    assert ModelSpec.from_dict(spec.to_dict()) == spec
    assert ModelSpec.from_dict({k: v for k, v in spec.to_dict().items() if k != "optim_dtype"}).optim_dtype == "fp32"
    (problem,) = ModelSpec.problems_of({"optim_dtype": "fp16"})
    assert problem.field == "model.optim_dtype" and "fp32, bf16" in str(problem)
