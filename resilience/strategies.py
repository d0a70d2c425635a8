"""Hypothesis strategies for checkpoint resilience tests: the public facade.

    from hypothesis import given
    import resilience.strategies as rst

    @given(rst.scenarios(max_world=2, faults=["truncate", "bit_flip"]))
    def test_my_checkpoint(scenario):
        rst.judge(scenario, backend="my_package.adapter:factory")   # raises ScenarioFailed with the replay

Every strategy takes keyword-only arguments, draws only valid values and shrinks toward the simplest
one; a bad argument raises InvalidStrategyArgument (a hypothesis InvalidArgument and a
resilience ConfigError). The state machine of the checkpoint lifecycle is lifecycle_machine()."""

from .fuzz.fault_strategies import fault_schedules, faults
from .fuzz.judge import ScenarioFailed, judge, judge_all
from .fuzz.machine import lifecycle_machine
from .fuzz.scenario_strategies import SCENARIO_FAULTS, TIMED_FAULTS, backend_specs, combinations, scenarios
from .fuzz.state_strategies import dtypes, model_specs, optimizers, precisions, topologies, transitions
from .fuzz.strategy_args import InvalidStrategyArgument

__all__ = [
    "InvalidStrategyArgument",
    "SCENARIO_FAULTS",
    "ScenarioFailed",
    "TIMED_FAULTS",
    "backend_specs",
    "combinations",
    "dtypes",
    "fault_schedules",
    "faults",
    "judge",
    "judge_all",
    "lifecycle_machine",
    "model_specs",
    "optimizers",
    "precisions",
    "scenarios",
    "topologies",
    "transitions",
]
