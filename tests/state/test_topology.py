import math

import pytest
from hypothesis import given, strategies as st

from resilience.errors import ConfigError
from resilience.state import ModelSpec, ParallelGroups, Topology, Transition, validate_sharding_integrity
from resilience.state.sharding import ShardingIntegrityError
from resilience.state.training import TrainingState


def test_megatron_rank_order_tp_fastest_then_dp_then_pp():
    topo = Topology(tp=2, pp=2, dp=2)
    assert [(c.tp, c.dp, c.pp) for c in topo.all_coords()] == [
        (0, 0, 0),
        (1, 0, 0),
        (0, 1, 0),
        (1, 1, 0),
        (0, 0, 1),
        (1, 0, 1),
        (0, 1, 1),
        (1, 1, 1),
    ]
    assert topo.tp_groups()[0] == [0, 1]
    assert topo.dp_groups()[0] == [0, 2]
    assert topo.pp_groups()[0] == [0, 4]
    assert all(topo.rank_of(c.tp, c.pp, c.dp) == c.rank for c in topo.all_coords())


def test_context_and_expert_parallel_in_megatrons_order_tp_cp_ep_dp_pp():
    topo = Topology.parse("tp2pp2dp2cp2ep2")
    assert str(topo) == "tp2pp2dp2ep2cp2" and topo.world == 16 and topo.edp == 4
    first = topo.all_coords()[:8]  # pipeline stage 0
    assert [(c.tp, c.cp, c.dp) for c in first[:4]] == [(0, 0, 0), (1, 0, 0), (0, 1, 0), (1, 1, 0)]
    assert [c.dpcp for c in first] == [0, 0, 1, 1, 2, 2, 3, 3]  # cp runs faster than dp
    assert [(c.etp, c.ep, c.edp) for c in first[:4]] == [(0, 0, 0), (0, 1, 0), (0, 0, 1), (0, 1, 1)]
    assert topo.dp_cp_groups()[0] == [0, 2, 4, 6] and topo.dp_groups()[0] == [0, 4]
    assert topo.ep_groups()[0] == [0, 1] and topo.edp_groups()[0] == [0, 2, 4, 6]
    assert all(topo.rank_of(c.tp, c.pp, c.dp, c.cp) == c.rank for c in topo.all_coords())
    # every rank of a stage sits once in the expert grid
    assert len({(c.pp, c.etp, c.ep, c.edp) for c in topo.all_coords()}) == topo.world


def test_a_topology_is_written_with_the_dimensions_that_are_not_one_and_reads_back():
    for text in ("tp1pp1dp1", "tp2pp2dp1vpp2", "tp1pp1dp4ep2etp2", "tp2pp1dp2cp2"):
        topo = Topology.parse(text)
        assert str(topo) == text and Topology.from_dict(topo.to_dict()) == topo
    assert Topology.parse("dp4ep2") == Topology(dp=4, ep=2)  # a dimension left out is 1
    assert Topology.parse("2,1,4") == Topology(2, 1, 4)
    assert Topology.from_dict({"tp": 2, "pp": 1, "dp": 1}).to_dict() == {"tp": 2, "pp": 1, "dp": 1}  # old manifests
    for bad, words in (("tp2tp2", "tp twice"), ("tp2x", "cannot read"), ("pp1vpp2", "needs pipeline parallel")):
        with pytest.raises(ConfigError, match=words):
            Topology.parse(bad)


def test_virtual_pipeline_chunks_interleave_the_layers():
    spec = ModelSpec(num_layers=8)
    assert spec.layers_of_stage(0, 2, 2) == [0, 1, 4, 5] and spec.layers_of_stage(1, 2, 2) == [2, 3, 6, 7]
    assert spec.layers_of_stage(1, 2) == [4, 5, 6, 7]
    with pytest.raises(ConfigError, match="pp=2 x vpp=3"):
        ModelSpec(num_layers=8).check_topology(Topology(pp=2, vpp=3))


@pytest.mark.parametrize(
    "kwargs, field",
    [
        ({"tp": 0}, "topology.tp"),
        ({"pp": -1}, "topology.pp"),
        ({"dp": 1.5}, "topology.dp"),
        ({"tp": 8, "pp": 8, "dp": 8}, "topology"),
        ({"tp": 2, "dp": 2, "ep": 8}, "topology.ep"),
        ({"pp": 1, "vpp": 2}, "topology.vpp"),
        ({"cp": 0}, "topology.cp"),
    ],
)
def test_impossible_topology_names_the_field(kwargs, field):
    with pytest.raises(ConfigError) as e:
        Topology(**kwargs)
    assert e.value.field == field


@pytest.mark.parametrize(
    "spec, topo, field",
    [
        (ModelSpec(num_layers=3), Topology(pp=2), "model.num_layers"),
        (ModelSpec(heads=4, hidden=32), Topology(tp=8), "model.heads"),
        (ModelSpec(ffn_hidden=66, heads=4), Topology(tp=4), "model.ffn_hidden"),
        (ModelSpec(), Topology(dp=2, ep=2), "topology.ep"),  # experts split, and the model has none
        (ModelSpec(num_experts=3), Topology(dp=2, ep=2), "topology.ep"),
        (ModelSpec(num_experts=2, ffn_hidden=63), Topology(dp=2, etp=2), "topology.etp"),
    ],
)
def test_model_that_cannot_split_names_the_field(spec, topo, field):
    with pytest.raises(ConfigError) as e:
        spec.check_topology(topo)
    assert e.value.field == field


def test_bad_model_fields_are_named():
    with pytest.raises(ConfigError, match="model.hidden"):
        ModelSpec(hidden=30, heads=4)
    with pytest.raises(ConfigError, match="model.dtype"):
        ModelSpec(dtype="fp8")
    with pytest.raises(ConfigError, match="model.bogus"):
        ModelSpec.from_dict({"bogus": 1})


def test_parse_topology_and_transition():
    assert Topology.parse("tp2pp1dp4") == Topology(2, 1, 4) == Topology.parse("2,1,4")
    t = Transition.parse("tp2pp2dp1->tp1pp2dp2")
    assert str(t) == "tp2pp2dp1->tp1pp2dp2" and t.changed == ("tp", "dp")
    with pytest.raises(ConfigError, match="tp2pp1dp4"):
        Topology.parse("two")


def test_vocab_padding_follows_megatron():
    spec = ModelSpec(vocab=100, make_vocab_size_divisible_by=8)
    assert [spec.padded_vocab(tp) for tp in (1, 2, 4)] == [104, 112, 128]


@st.composite
def topologies_and_specs(draw):
    tp = draw(st.sampled_from([1, 2, 4]))
    pp = draw(st.integers(1, 4))
    dp = draw(st.integers(1, max(1, 8 // (tp * pp))))
    cp = draw(st.integers(1, max(1, 8 // (tp * pp * dp))))
    vpp = draw(st.integers(1, 2)) if pp > 1 else 1
    heads = tp * draw(st.integers(1, 3))
    stage = tp * cp * dp
    divisors = [n for n in range(1, stage + 1) if stage % n == 0]
    etp = draw(st.sampled_from(divisors))
    ep = draw(st.sampled_from([n for n in divisors if (stage // etp) % n == 0]))
    experts = ep * draw(st.integers(1, 3)) if draw(st.booleans()) or ep * etp > 1 else 0
    spec = ModelSpec(
        num_layers=pp * vpp * draw(st.integers(1, 2)),
        heads=heads,
        hidden=heads * draw(st.integers(1, 3)),
        ffn_hidden=math.lcm(tp, etp) * draw(st.integers(1, 6)),
        vocab=draw(st.integers(1, 70)),
        make_vocab_size_divisible_by=draw(st.sampled_from([1, 2, 8])),
        optimizer=draw(st.sampled_from(["adam", "distributed"])),
        dtype=draw(st.sampled_from(["fp32", "bf16"])),
        num_experts=experts,
        shared_experts=bool(experts) and draw(st.booleans()),
    )
    return Topology(tp, pp, dp, ep=ep, etp=etp, cp=cp, vpp=vpp), spec


@given(topologies_and_specs())
def test_shards_cover_every_element_once(case):
    topo, spec = case
    descriptions = []
    for rank in range(topo.world):
        state = TrainingState(spec, topo, rank)
        descriptions += [r.describe() for r in state.sharded_state_dict()]
    validate_sharding_integrity(descriptions)


def test_integrity_check_fails_on_a_gap_and_an_overlap():
    spec, topo = ModelSpec(), Topology(tp=2)
    descriptions = [r.describe() for rank in range(2) for r in TrainingState(spec, topo, rank).sharded_state_dict()]
    qkv = "model.decoder.layers.0.self_attention.linear_qkv.weight"
    gap = [d for d in descriptions if not (d["key"] == qkv and d["global_offset"][0] > 0)]
    with pytest.raises(ShardingIntegrityError, match="cover"):
        validate_sharding_integrity(gap)
    overlap = [dict(d, global_offset=[0, 0]) if d["key"] == qkv else d for d in descriptions]
    with pytest.raises(ShardingIntegrityError, match="same elements"):
        validate_sharding_integrity(overlap)


def test_distributed_optimizer_rows_as_docs_adapters_shows_them():
    """docs/adapters.md's table of `global_offset` for distributed-optimizer rows (tp2pp1dp2, output layer)."""
    topo = Topology(2, 1, 2)
    seen = {}
    for rank in range(topo.world):
        state = TrainingState(
            ModelSpec(optimizer="distributed"), topo, rank, groups=ParallelGroups.without_collectives(rank)
        )
        for r in state.sharded_state_dict():
            if r.key in ("model.output_layer.weight", "optimizer.exp_avg.output_layer.weight"):
                seen[rank, r.key.split(".")[0]] = (r.global_offset, tuple(r.data.shape), r.replica_id)
                assert r.global_shape == (112, 32) and r.logical_shape == (100, 32)
    assert seen == {
        (0, "model"): ((0, 0), (56, 32), 0),
        (0, "optimizer"): ((0, 0), (28, 32), 0),
        (1, "model"): ((56, 0), (56, 32), 0),
        (1, "optimizer"): ((56, 0), (28, 32), 0),
        (2, "model"): ((0, 0), (56, 32), 1),
        (2, "optimizer"): ((28, 0), (28, 32), 0),
        (3, "model"): ((56, 0), (56, 32), 1),
        (3, "optimizer"): ((84, 0), (28, 32), 0),
    }


def test_experts_sit_on_their_expert_parallel_rank_split_over_etp():
    """tp2pp1dp2ep2etp2 with 4 experts: each stage's ranks are etp x ep (edp 1); expert 0's fc1 rows are
    split over the two etp ranks of ep rank 0, and ep rank 1 holds experts 2 and 3 only."""
    spec, topo = ModelSpec(num_experts=4, optimizer="distributed"), Topology.parse("tp2pp1dp2ep2etp2")
    held = {}
    for rank in range(topo.world):
        state = TrainingState(spec, topo, rank, groups=ParallelGroups.without_collectives(rank))
        held[rank] = {p.layout.expert for p in state.pieces if p.layout.expert is not None}
        fc1 = [
            p for p in state.pieces if p.layout.key == "decoder.layers.0.mlp.experts.local_experts.0.linear_fc1.weight"
        ]
        if state.coords.ep == 0:
            (piece,) = fc1
            assert piece.offset[0] == state.coords.etp * piece.local_shape[0] and piece.param_replica == 0
        else:
            assert fc1 == []
    assert held == {0: {0, 1}, 1: {0, 1}, 2: {2, 3}, 3: {2, 3}}


def _piece(offset, shape, key="w", whole=(8, 8)):
    return {
        "key": key,
        "global_shape": list(whole),
        "replica_id": 0,
        "global_offset": list(offset),
        "local_shape": list(shape),
    }


def test_the_overlap_check_finds_pieces_sharing_elements_whichever_dimension_is_split():
    """The check sweeps along the dimension split most: column pieces (dim 1) with one overlap, row
    pieces (dim 0) with one, and a small piece lying across four blocks."""
    columns = [_piece((0, c), (8, 1)) for c in range(8)]
    validate_sharding_integrity(columns)
    with pytest.raises(ShardingIntegrityError, match="same elements"):
        validate_sharding_integrity(columns[:-1] + [_piece((0, 6), (8, 2))])
    rows = [_piece((r, 0), (1, 8)) for r in range(8)]
    with pytest.raises(ShardingIntegrityError, match="same elements"):
        validate_sharding_integrity(rows[:3] + [_piece((2, 0), (2, 8))] + rows[4:])
    blocks = [_piece((r, c), (4, 4)) for r in (0, 4) for c in (0, 4)]
    validate_sharding_integrity(blocks)
    with pytest.raises(ShardingIntegrityError, match="same elements"):  # a wide piece over two blocks
        validate_sharding_integrity(blocks + [_piece((3, 3), (2, 2))])
