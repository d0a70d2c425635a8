"""The adversarial state model: the data position is no function of the iteration, values a lower
precision cannot hold, uneven distributed-optimizer rows, every rank's RNG, generations that differ."""

import torch

from resilience.runner.matrix import MODEL, TRANSITIONS, model_of
from resilience.state import GENERATION_PREFIX, RUN_BOUND_KEYS, ModelSpec, Topology, TrainingState, Transition, combine
from resilience.state.fingerprints import assemble, gather_pieces, generations, local_pieces


def test_ramp_up_and_skips_break_the_link_between_iteration_and_data_position():
    spec = ModelSpec()
    state = TrainingState(spec, Topology(), 0)
    positions, steps = [], []
    for _ in range(8):
        state.step()
        positions.append(state.consumed_samples)
        steps.append(state.opt_step)
    assert positions != [spec.global_batch_size * i for i in range(1, 9)]
    assert steps[-1] < 8 and len(set(positions)) == 8  # some iterations skipped, each still consumed data
    plain = TrainingState(ModelSpec(rampup_samples=0, skip_every=0), Topology(), 0)
    plain.train(8)
    assert (plain.consumed_samples, plain.opt_step) == (8 * spec.global_batch_size, 8)


def test_the_data_position_changes_the_values():
    a, b = TrainingState(ModelSpec(), Topology(), 0), TrainingState(ModelSpec(), Topology(), 0)
    a.train(4)
    b.train(3)
    b.consumed_samples += 1  # the same iterations, another data position
    b.step()
    key = "output_layer.weight"
    assert a.iteration == b.iteration and not torch.equal(a.params[key], b.params[key])


def test_wide_values_do_not_survive_a_lower_precision():
    for dtype, lower in (("fp32", torch.bfloat16), ("fp32", torch.float16), ("bf16", torch.float16)):
        state = TrainingState(ModelSpec(dtype=dtype), Topology(), 0)
        state.train(3)
        for table in (state.params, state.exp_avg, state.exp_avg_sq):
            t = table["decoder.layers.0.mlp.linear_fc1.weight"]
            assert torch.isfinite(t).all()
            changed = (t.to(lower).to(t.dtype) != t).float().mean()
            assert changed > 0.2, (dtype, lower, float(changed))
    unit = TrainingState(ModelSpec(value_range="unit"), Topology(), 0).params["output_layer.weight"]
    assert unit.abs().max() <= 0.5


def test_matrix_model_leaves_uneven_distributed_optimizer_rows():
    for label in ("dp", "tp+pp+dp"):
        t = Transition.parse(TRANSITIONS[label])
        for topo in (t.save, t.load):
            if topo.dp == 1:
                continue
            spec = model_of(label)
            rows = {p.key: p.shape[0] // topo.tp if p.tp_dim == 0 else p.shape[0] for p in spec.params(topo.tp)}
            uneven = [key for key, n in rows.items() if n % topo.dp]
            assert uneven, (label, topo)
    assert {model_of(c).optimizer for c in ("save/load", "io_error", "dp", "tp+pp+dp")} == {"adam", "distributed"}
    assert MODEL.value_range == "wide" and MODEL.rampup_samples and MODEL.skip_every


def test_every_ranks_rng_is_in_the_fingerprint():
    states = [TrainingState(ModelSpec(), Topology(1, 1, 2), r) for r in range(2)]
    pieces = [p for s in states for p in local_pieces(s.sharded_state_dict())]
    good = assemble(pieces)["rng"]
    assert good == assemble(local_pieces(states[0].sharded_state_dict()))["rng"]  # agreeing replicas: one value
    torch.rand(1, generator=states[1].rng)  # dp rank 1 (a replica no save writes) restored the wrong RNG
    bad = assemble([p for s in states for p in local_pieces(s.sharded_state_dict())])["rng"]
    assert bad != good


def test_a_stamp_changes_every_save_but_not_what_training_determines():
    state = TrainingState(ModelSpec(), Topology(), 0)
    state.train(2)
    state.stamp(1)
    a = assemble(gather_pieces(state.sharded_state_dict()))
    state.stamp(2)
    b = assemble(gather_pieces(state.sharded_state_dict()))
    assert combine(a, RUN_BOUND_KEYS) == combine(b, RUN_BOUND_KEYS)
    assert a["rng"] != b["rng"] and combine(a) != combine(b)
    found = generations(gather_pieces(state.sharded_state_dict()), GENERATION_PREFIX)
    assert {g for at in found.values() for g in at} == {2}
    state.stamps["output_layer.weight"][:3] = 1.0  # three rows kept from the earlier save
    found = generations(gather_pieces(state.sharded_state_dict()), GENERATION_PREFIX)["output_layer.weight"]
    assert found[1]["box"][0] == [0, 3] and found[2]["elements"] > 0
