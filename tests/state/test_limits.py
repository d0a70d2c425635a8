import math

import pytest
from hypothesis import given, strategies as st

from resilience.errors import ConfigError
from resilience.state import ModelSpec, Topology
from resilience.state.limits import BYTES_PER_ELEMENT, check_fits, job_bytes, model_elements, process_bytes


@given(
    layers=st.integers(1, 6),
    heads=st.integers(1, 4),
    per_head=st.integers(1, 4),
    ffn=st.integers(1, 40),
    vocab=st.integers(1, 300),
    tp=st.sampled_from([1, 2, 4]),
)
def test_the_closed_form_counts_every_parameter(layers, heads, per_head, ffn, vocab, tp):
    spec = ModelSpec(num_layers=layers, hidden=heads * per_head, ffn_hidden=ffn, heads=heads, vocab=vocab)
    assert model_elements(spec, tp) == sum(math.prod(p.shape) for p in spec.params(tp))


def test_a_job_that_does_not_fit_is_refused_with_its_size():
    spec = ModelSpec()
    need = job_bytes(spec, Topology(dp=2))
    assert need == model_elements(spec) * 3 * BYTES_PER_ELEMENT + 2 * process_bytes(2)  # 2 replicas and the runner
    check_fits(spec, Topology(dp=2), ceiling=need)
    with pytest.raises(ConfigError, match="more than the ceiling"):
        check_fits(spec, Topology(dp=2), ceiling=need - 1)


def test_absurd_sizes_cost_nothing_to_measure():
    spec = ModelSpec(num_layers=1024, hidden=1 << 20, heads=1, ffn_hidden=1 << 22, vocab=1 << 24)
    assert model_elements(spec) > 10**15
    with pytest.raises(ConfigError, match="model"):
        check_fits(spec, Topology())


@pytest.mark.parametrize(
    "kw, field",
    [
        ({"lr": float("nan")}, "model.lr"),
        ({"lr": float("inf")}, "model.lr"),
        ({"lr": "abc"}, "model.lr"),
        ({"lr": 0}, "model.lr"),
        ({"lr": True}, "model.lr"),
        ({"seed": -1}, "model.seed"),
        ({"seed": 2**32}, "model.seed"),
        ({"hidden": 2**20 + 4}, "model.hidden"),
        ({"num_layers": 1025}, "model.num_layers"),
        ({"vocab": 10**13}, "model.vocab"),
        ({"start_iteration": -1}, "model.start_iteration"),
        ({"start_iteration": 10**9 + 1}, "model.start_iteration"),
        ({"start_iteration": 1.5}, "model.start_iteration"),
    ],
)
def test_model_fields_are_checked_for_type_and_range(kw, field):
    with pytest.raises(ConfigError) as e:
        ModelSpec(**kw)
    assert e.value.field == field


def test_every_problem_of_a_model_mapping_at_once():
    problems = ModelSpec.problems_of({"hiden": 8, "lr": "x", "heads": 0, "vocab": 5})
    assert [p.field for p in problems] == ["model.hiden", "model.lr", "model.heads"]
    # across fields, once fields are fine
    assert [p.field for p in ModelSpec.problems_of({"hidden": 30})] == ["model.hidden"]
    assert ModelSpec.problems_of({"hidden": 6, "heads": 3}) == []


def test_sized_params_are_extra_parameters_of_the_last_stage_whose_shards_may_be_empty():
    from resilience.errors import ConfigError
    from resilience.state import ModelSpec, Topology
    from resilience.state.limits import model_elements
    from resilience.state.training import TrainingState

    spec = ModelSpec.from_dict({"optimizer": "distributed", "sized_params": {"one_row": 1, "past_4k": 1025}})
    assert spec.sized_params == (("one_row", 1), ("past_4k", 1025)) and hash(spec)
    assert spec.to_dict()["sized_params"] == {"one_row": 1, "past_4k": 1025}
    assert ModelSpec.from_dict(spec.to_dict()) == spec
    assert model_elements(spec) == model_elements(ModelSpec(optimizer="distributed")) + 1026
    first, last = (TrainingState(spec, Topology.parse("tp1pp2dp2"), r) for r in (0, 2))
    assert not any(p.layout.key.startswith("extra.") for p in first.pieces)
    rows = {p.layout.key: p.opt_rows for p in last.pieces if p.layout.key.startswith("extra.")}
    assert rows == {"extra.one_row.weight": (0, 0), "extra.past_4k.weight": (0, 512)}  # dp rank 0: one empty
    for bad, says in (
        ({"a-b": 3}, "a name must be 1-40 characters"),
        ({"a": 0}, "must be a number of elements in 1..16777216, got 0"),
        ([1], "must be a mapping of name: elements, got list"),
        ({f"p{i}": 1 for i in range(17)}, "17 parameters"),
    ):
        [problem] = ModelSpec.problems_of({"sized_params": bad})
        assert isinstance(problem, ConfigError) and says in str(problem)


def test_a_world_too_large_for_this_machine_is_refused_with_fewer_ranks_as_the_fix():
    big = Topology.parse("tp2pp2dp16cp4")  # 256 ranks, the most a topology may have
    assert job_bytes(ModelSpec(), big) > big.world * process_bytes(big.world)
    with pytest.raises(ConfigError, match=r"256 rank processes.*use fewer ranks"):
        check_fits(ModelSpec(), big, ceiling=big.world * process_bytes(big.world))
    check_fits(ModelSpec(), big, ceiling=2 * job_bytes(ModelSpec(), big))  # a machine with room runs it
