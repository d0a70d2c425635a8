"""The two modes of a fuzzing run under one set of Hypothesis settings: generated scenarios (drawn ahead
and judged in workers when asked to) and the lifecycle state machine."""

from __future__ import annotations

from hypothesis import HealthCheck, Phase, given, settings
from hypothesis.database import DirectoryBasedExampleDatabase
from hypothesis.stateful import run_state_machine_as_test

from ..runner.adapters import preload
from ..runner.scenario import Scenario
from ..vocab.combos import Combination, valid_combinations
from .examples import ExampleJudge
from .machine import lifecycle_machine
from .options import FuzzOptions
from .scenario_strategies import scenarios
from .speculation import draw_ahead


def _settings(opts: FuzzOptions, database: str | None) -> settings:
    return settings(
        settings.get_profile(opts.profile),
        max_examples=opts.examples,
        deadline=None,
        database=DirectoryBasedExampleDatabase(database) if database is not None else None,
        derandomize=False,
        suppress_health_check=list(HealthCheck),
        report_multiple_bugs=opts.all_bugs,
        stateful_step_count=opts.max_steps,
        print_blob=False,
        phases=[p for p in Phase if p is not Phase.explain],
    )  # explaining reruns on real ranks


def _seeded(test, seed: int):
    # what hypothesis.seed() does, minus switching the example database off: the run keeps its database
    test._hypothesis_internal_use_seed = seed
    return test


def fuzz_scenarios(opts: FuzzOptions, judge: ExampleJudge, database: str) -> None:
    """The scenarios mode: generated scenarios, each judged on its first combination."""
    strategy = scenarios(
        combinations=opts.combos,
        max_world=opts.max_world,
        faults=opts.faults,
        max_steps=opts.max_steps,
        backend=opts.backend,
        backend_options=opts.backend_options,
        precision_changes=opts.precision_changes,
        name="fuzz-scenario",
    )

    @_settings(opts, database)
    @given(strategy)
    def fuzz_scenarios(scenario):
        judge("scenarios", scenario, scenario.combinations[0])

    if opts.workers > 1:
        # the same seed and settings draw the same examples in the same order, as long as they pass:
        # draw them first (no case runs), judge them in workers while Hypothesis asks for them one by one
        drawn = draw_ahead(
            lambda record: _seeded(_settings(opts, None)(given(strategy)(record)), opts.seed),
            meanwhile=lambda: preload((opts.backend, c) for c in opts.combos or valid_combinations()),
        )
        judge.run_ahead([(s, s.combinations[0]) for s in drawn])
    try:
        _seeded(fuzz_scenarios, opts.seed)()
    finally:
        judge.stop_running_ahead()


def fuzz_machine(opts: FuzzOptions, judge: ExampleJudge, database: str) -> None:
    """The machine mode: the lifecycle state machine, each of its saves' scenarios judged as it goes."""

    def judge_with(scenario: Scenario, combo: Combination):
        return judge("machine", scenario, combo)

    machine = lifecycle_machine(
        combinations=opts.combos,
        max_world=opts.max_world,
        faults=opts.faults,
        backend=opts.backend,
        precision_changes=opts.precision_changes,
        judge_with=judge_with,
        on_nothing_to_judge=lambda: judge.nothing_to_judge("machine"),
    )
    machine.name = "fuzz-machine"
    run_state_machine_as_test(_seeded(machine, opts.seed), settings=_settings(opts, database))
