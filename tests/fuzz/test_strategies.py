"""The strategies draw only valid inputs, shrink to the simplest ones, and refuse bad arguments clearly.
No rank processes here: scenarios are checked by the YAML loader and the planner, not run."""

import pytest
from hypothesis import find, given, settings, strategies as st
from hypothesis.errors import InvalidArgument, NoSuchExample

import resilience.strategies as rst
from resilience.errors import ConfigError
from resilience.faults import KINDS, Fault, fault_from_dict
from resilience.runner.fault_steps import FAULT_STEPS
from resilience.runner.plan import plan_jobs
from resilience.runner.scenario import Scenario, load_text
from resilience.state import Topology, Transition
from resilience.state.precision import Precision
from resilience.vocab.combos import Combination, valid_combinations


@given(rst.topologies(max_world=6, min_world=2, pp=1))
def test_topologies_stay_in_bounds(t):
    assert isinstance(t, Topology) and 2 <= t.world <= 6 and t.pp == 1


def test_topologies_shrink_to_the_smallest_world():
    assert find(rst.topologies(max_world=8), lambda t: t.tp >= 2) == Topology(2, 1, 1)
    assert find(rst.topologies(max_world=8), lambda t: t.world >= 4 and t.pp > 1) == Topology(1, 2, 2)


@given(rst.transitions(max_world=4, changes=["tp"]))
def test_transitions_change_exactly_what_was_asked(t):
    assert isinstance(t, Transition) and t.changed == ("tp",) and t.load.world <= 4


@given(st.data())
def test_expert_changes_are_drawn_on_a_model_with_experts_that_splits_over_both_sides(data):
    t = data.draw(rst.transitions(max_world=8, changes=["ep"]))
    assert t.changed == ("ep",) and max(t.save.ep, t.load.ep) > 1
    spec = data.draw(rst.model_specs(topologies=[t.save, t.load]))
    assert spec.num_experts and spec.num_experts % max(t.save.ep, t.load.ep) == 0
    spec.check_topology(t.save)
    spec.check_topology(t.load)


def test_expert_dimensions_shrink_to_one():
    big = find(rst.topologies(max_world=8), lambda t: t.world >= 4)
    assert big.world == 4 and big.ep == big.etp == 1
    assert find(rst.topologies(max_world=8), lambda t: t.ep > 1) == Topology(1, 1, 2, ep=2)


@given(rst.transitions(max_world=4, save="tp2pp1dp1"))
def test_transitions_from_a_fixed_topology(t):
    assert t.save == Topology(2, 1, 1) and t.load.world <= 4


def test_transitions_shrink_to_no_change():
    t = find(rst.transitions(max_world=4), lambda t: True)
    assert t.save == t.load == Topology(1, 1, 1)


@given(st.data())
def test_model_specs_split_over_every_topology(data):
    topos = data.draw(st.lists(rst.topologies(max_world=8), min_size=1, max_size=3))
    spec = data.draw(rst.model_specs(topologies=topos))
    for t in topos:
        spec.check_topology(t)
        assert spec.padded_vocab(t.tp) % t.tp == 0


@given(rst.model_specs(topology="tp2pp2dp1", dtypes=["bf16"], optimizers=["distributed"]))
def test_model_specs_for_one_topology(spec):
    spec.check_topology(Topology(2, 2, 1))
    assert (spec.dtype, spec.optimizer) == ("bf16", "distributed")


def test_model_specs_shrink_to_the_smallest_model():
    spec = find(rst.model_specs(topology=Topology(2, 2, 1)), lambda s: True)
    assert (spec.num_layers, spec.heads, spec.hidden, spec.ffn_hidden, spec.vocab) == (2, 2, 2, 2, 1)


@given(rst.combinations(types=["GLOBAL", "torch_dcp"], io="async"))
def test_combinations_are_valid_and_filtered(c):
    assert c in valid_combinations() and c.is_async and c.type.value in ("GLOBAL", "TORCH_DCP")


def test_combinations_shrink_to_the_seed_default():
    assert str(find(rst.combinations(), lambda c: True)) == "LEGACY/torch/sync"


@given(st.data())
def test_faults_check_out_for_their_world(data):
    world = data.draw(st.integers(1, 8))
    fault = data.draw(rst.faults(world=world))
    assert isinstance(fault, Fault)
    again = fault_from_dict(fault.to_dict(), world=world)  # a record round-trips through YAML/JSON form
    assert again == fault
    assert all(r < world for r in fault.target.ranks(world))


@given(rst.fault_schedules(world=2, kinds=["rank_crash", "truncate"], min_size=1, max_size=2))
def test_fault_schedules(schedule):
    assert 1 <= len(schedule) <= 2 and {f.kind for f in schedule} <= {"rank_crash", "truncate"}


@pytest.mark.parametrize("kind", sorted(KINDS))
@settings(max_examples=5)
@given(data=st.data())
def test_every_fault_kind_can_be_drawn(kind, data):
    fault = data.draw(rst.faults(world=2, kinds=[kind]))
    assert fault.kind == kind and fault_from_dict(fault.to_dict(), world=2) == fault


def _worlds(s: Scenario) -> list[int]:
    out = [s.topology.world]
    out += [
        Topology.parse(step.args["topology"]).world
        for step in s.steps
        if step.kind == "resume" and "topology" in step.args
    ]
    return out


@settings(max_examples=60)
@given(rst.scenarios(max_world=4))
def test_scenarios_validate_like_yaml_files(s):
    assert isinstance(s, Scenario) and len(s.combinations) == 1
    again = load_text(s.to_yaml(), "<round trip>")  # the YAML written beside the evidence replays
    assert again.to_dict() == s.to_dict()
    assert max(_worlds(s)) <= 4
    for step in s.steps:
        if step.kind == "resume" and "topology" in step.args:
            s.model.check_topology(Topology.parse(step.args["topology"]))
    assert any(step.kind == "save" for step in s.steps)
    assert plan_jobs(s, s.combinations[0])  # the planner turns it into jobs


@settings(max_examples=60)
@given(rst.scenarios(max_world=4))
def test_scenario_faults_arm_right_before_a_save(s):
    kinds = [step.kind for step in s.steps]
    for i, step in enumerate(s.steps):
        if step.kind in ("crash", "fault", "lose_unsynced"):
            assert kinds[i + 1] == "save", kinds  # an in-process fault always has a save to strike
        if step.kind == "corrupt":
            assert "save" in kinds[:i], kinds  # damage at rest only once something was saved


@given(rst.scenarios(combinations=["GLOBAL/torch_dist/async"], faults=(), moves=False, max_world=2))
def test_scenarios_without_faults_or_moves(s):
    assert s.combinations == [Combination.parse("GLOBAL/torch_dist/async")]
    assert not any(step.kind in FAULT_STEPS for step in s.steps)
    assert not any("topology" in step.args for step in s.steps if step.kind == "resume")


def test_scenarios_shrink_to_a_minimal_sequence():
    fixed = settings(database=None, derandomize=True)
    s = find(rst.scenarios(max_world=4), lambda s: any(step.kind == "corrupt" for step in s.steps), settings=fixed)
    steps = [step.to_dict() for step in s.steps]
    # alone it shrinks to [train 1, save, corrupt truncate]; in the full test run (other tests before it in the
    # same worker) it has stopped at another local minimum, an older checkpoint's deletion: a few steps, ending
    # in damage
    assert steps == [{"train": 1}, {"save": None}, {"corrupt": {"kind": "truncate", "rank": 0, "seed": 0}}] or (
        len(steps) <= 5 and "corrupt" in steps[-1] and steps.count({"save": None}) <= 2
    ), steps
    # the topology and the model shrink to the smallest, or to a neighbour of it (tp 2 and the heads it needs)
    assert s.topology.world <= 2 and s.topology.pp == 1 and str(s.combinations[0]) == "LEGACY/torch/sync"
    assert (s.model.num_layers, s.model.vocab) == (1, 1) and s.model.hidden <= 2


@given(rst.precisions())
def test_precisions_read_back_from_their_spelling(p):
    assert Precision.parse(str(p)) == p


def test_precisions_shrink_to_fp32():
    assert find(rst.precisions(), lambda p: True) == Precision("fp32", "fp32")
    assert find(rst.precisions(optim=["bf16"]), lambda p: True) == Precision("fp32", "bf16")


@given(rst.transitions(max_world=2, precisions=True))
def test_transitions_may_name_each_sides_precision(t):
    assert t.save_precision is not None and t.load_precision is not None
    assert Transition.parse(str(t)) == t


def test_transitions_with_precisions_shrink_to_no_change_in_fp32():
    t = find(rst.transitions(max_world=2, precisions=True), lambda t: True)
    assert (t.save_precision, t.load_precision) == (Precision(), Precision())
    optim = find(rst.transitions(max_world=2, precisions=True), lambda t: t.precision_changed)
    assert str(optim) == "tp1pp1dp1:fp32->tp1pp1dp1:fp32+optim_bf16"


@given(rst.model_specs(topology="tp1pp1dp2", optim_dtypes=["bf16"]))
def test_model_specs_may_keep_bf16_moments(spec):
    assert spec.optim_dtype == "bf16"


@settings(max_examples=60)
@given(rst.scenarios(max_world=2, precision_changes=True))
def test_scenarios_change_precision_only_once_saving_is_over(s):
    again = load_text(s.to_yaml(), "<round trip>")  # the loader refuses a save after a precision change
    assert again.to_dict() == s.to_dict()
    kinds = [step.kind for step in s.steps]
    changes = [i for i, step in enumerate(s.steps) if step.kind == "resume" and "precision" in step.args]
    for i in changes:
        assert Precision.parse(s.steps[i].args["precision"]) != s.model.precision
        assert "save" in kinds[:i] and "save" not in kinds[i:], kinds


def test_scenarios_draw_a_change_of_the_optimizer_states_precision():
    s = find(
        rst.scenarios(max_world=1, faults=(), precision_changes=True),
        lambda s: any(st.args.get("precision") == "fp32+optim_bf16" for st in s.steps if st.kind == "resume"),
    )
    assert [step.to_dict() for step in s.steps] == [
        {"train": 1},
        {"save": None},
        {"resume": {"continue": 0, "precision": "fp32+optim_bf16"}},
    ]
    assert str(s.model.precision) != "fp32+optim_bf16"


def test_scenarios_change_no_precision_unless_asked():
    with pytest.raises(NoSuchExample):
        find(
            rst.scenarios(max_world=1, faults=()),
            lambda s: any("precision" in st.args for st in s.steps if st.kind == "resume"),
            settings=settings(max_examples=50),
        )


BAD_ARGUMENTS = [
    (lambda: rst.topologies(max_world=0), "max_world"),
    (lambda: rst.topologies(max_world=65), "max_world"),
    (lambda: rst.topologies(min_world=5, max_world=4), "min_world"),
    (lambda: rst.topologies(tp=3, pp=2, max_world=4), "no topology with tp3pp2"),
    (lambda: rst.topologies(tp="2"), "tp"),
    (lambda: rst.transitions(max_world=1, changes=["tp"]), "changes"),
    (lambda: rst.transitions(changes=["zp"]), "zp"),
    (lambda: rst.transitions(save="tp9"), "save"),
    (lambda: rst.model_specs(topology="tp2pp1dp1", topologies=["tp1pp1dp1"]), "not both"),
    (lambda: rst.model_specs(topologies=[]), "topologies"),
    (lambda: rst.model_specs(dtypes=["fp8"]), "fp8"),
    (lambda: rst.model_specs(optim_dtypes=["fp16"]), "fp16"),
    (lambda: rst.precisions(optim=["fp8"]), "fp8"),
    (lambda: rst.model_specs(max_layers=0), "max_layers"),
    (lambda: rst.combinations(among=["GLOBAL/torch/sync"]), "not a valid combination"),
    (lambda: rst.combinations(types=["LOCAL"], io="async"), "no valid combination"),
    (lambda: rst.faults(world=0), "world"),
    (lambda: rst.faults(world=2, kinds=["meteor"]), "meteor"),
    (lambda: rst.fault_schedules(world=2, min_size=3, max_size=1), "min_size"),
    (lambda: rst.scenarios(faults=["rank_kill"]), "would not replay exactly"),
    (lambda: rst.scenarios(min_steps=5, max_steps=2), "min_steps"),
    (lambda: rst.scenarios(combinations=["LOCAL/torch/async"]), "io"),
    (lambda: rst.lifecycle_machine(faults=["rank_hang"]), "rank_hang"),
]


@pytest.mark.parametrize("call, says", BAD_ARGUMENTS, ids=[s for _, s in BAD_ARGUMENTS])
def test_bad_arguments_are_one_clear_error(call, says):
    with pytest.raises(rst.InvalidStrategyArgument) as e:
        call()
    assert isinstance(e.value, InvalidArgument) and isinstance(e.value, ConfigError) and isinstance(e.value, ValueError)
    assert says in str(e.value)


def test_generated_scenarios_reach_the_corners_of_the_state_model():
    """Start iterations past the padding and at 8, parameters past 4 KiB and of one row, padding rows with
    values (never beside a resume on another tp), each drawn; the corner first, so a failure shrinks toward it."""
    from hypothesis import HealthCheck, given, settings

    from resilience.fuzz.scenario_strategies import SIZED_PARAMS, START_ITERATIONS, scenarios

    seen: dict[str, set] = {"start": set(), "sized": set(), "padding": set()}

    @settings(max_examples=60, database=None, derandomize=True, suppress_health_check=list(HealthCheck))
    @given(scenarios(max_world=2, max_steps=3))
    def draw(scenario):
        m = scenario.model
        seen["start"].add(m.start_iteration)
        seen["sized"].add(m.sized_params)
        seen["padding"].add(m.padding_values)
        moved = [
            Topology.parse(s.args["topology"]) for s in scenario.steps if s.kind == "resume" and s.args.get("topology")
        ]
        assert not m.padding_values or all(t.tp == scenario.topology.tp for t in moved)
        lowest = [s.args for s in scenario.steps if s.kind == "corrupt" and "iteration" in s.args]
        assert all(a["iteration"] >= m.start_iteration for a in lowest)  # aimed at iterations the run made

    draw()
    assert seen["start"] == set(START_ITERATIONS) and len(seen["sized"]) == len(SIZED_PARAMS)
    assert seen["padding"] == {True, False} and START_ITERATIONS[0] == 9_999_998
