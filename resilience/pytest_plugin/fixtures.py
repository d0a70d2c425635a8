"""The plugin's fixtures, all session-scoped so @given tests can use them: the options, the run folder, the
backend under test, a launcher of rank processes, a runner of scenarios, and one combination per test."""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass

import pytest

from ..fuzz.events import events_of, faults_in, tell_hypothesis
from ..verdicts import FAILING
from .budget import BudgetSpent, in_property_test
from .case_run import run_case
from .options import ResilienceOptions, options_of


@dataclass(frozen=True)
class BackendUnderTest:
    """The checkpoint implementation the session tests; `make(combo)` builds it for one combination."""

    name: str
    combos: tuple

    def make(self, combo):
        from ..runner.adapters import make_backend

        return make_backend(self.name, combo)


class RankLauncher:
    """`launch(fn, world, args=(), kwargs=None, timeout=120)`: fn(ctx, *args, **kwargs) on `world` forked
    rank processes (torch.distributed on gloo); their results in rank order, or RankFailure with
    `failures: {rank: ...}`. Skips the test when world exceeds --resilience-max-world. A rank's temp folder
    (tempfile's, TMPDIR) is the job's own and goes with it: what must outlast the ranks goes to a folder of
    the test's (tmp_path) or into the result."""

    def __init__(self, options: ResilienceOptions):
        self.options = options

    def __call__(
        self, fn: Callable, world: int, *, args: tuple = (), kwargs: dict | None = None, timeout: float = 120.0
    ) -> list:
        if self.options.max_world is not None and world > self.options.max_world:
            pytest.skip(f"needs {world} ranks; --resilience-max-world is {self.options.max_world}")
        from ..launch import run_ranks

        return run_ranks(
            fn,
            world,
            args=args,
            kwargs=kwargs,
            timeout=timeout,
            log_dir=self.options.case_dir(getattr(fn, "__name__", "ranks")),
        )


class ScenarioRunner:
    """`run(scenario, combos=None, fail_on=None)`: run a Scenario (or a YAML file) for each of its
    combinations selected by --resilience-combos (and `combos`) that the backend under test declares.

    Every selected combination runs, a failing one included; then the CaseResults are returned, or one
    ScenarioFailed raised with all the failures: it is of the first failing combination's class (verdict,
    checker and evidence kind, as fuzz.judge.failure_class names it: `pytest.raises(ScenarioFailed)` and
    xfail keep working), its `result` and `replay` are that combination's, its `failures` lists every
    failing combination's ScenarioFailed (the first one first) and its message lists each with its replay.

    `fail_on`: the verdicts that fail (None: as every command counts them, status.FAILING, in a plain test;
    inside a property test fuzz.judge.BAD, FAIL and UNKNOWN, as `resilience fuzz` shrinks them: an UNPROBED
    or N/A example is a gap in the search, counted in the test's JUnit properties, never the example a
    FAIL shrinks to). Inside a property test the time and shrink budgets apply and Hypothesis events name
    the faults drawn; a budget spent after a combination failed raises the failures found so far."""

    def __init__(self, options: ResilienceOptions):
        self.options = options

    def __call__(self, scenario, combos=None, *, fail_on=None) -> list:
        __tracebackhide__ = True
        from ..runner.scenario import Scenario, load_file

        if not isinstance(scenario, Scenario):
            scenario = load_file(scenario)
        backend = self.options.backend or scenario.backend
        chosen = self.options.selected(scenario.combinations, backend)
        if combos is not None:
            from ..vocab.combos import Combination

            wanted = [c if isinstance(c, Combination) else Combination.parse(c) for c in combos]
            chosen = [c for c in chosen if c in wanted]
        if fail_on is None:
            from ..fuzz.judge import BAD

            fail_on = BAD if in_property_test() else FAILING
        results: list = []
        failures: list = []
        for combo in chosen:
            try:
                result, failed = self._one(scenario, combo, backend, tuple(fail_on))
            except BudgetSpent:
                if not failures:
                    raise
                break  # the failures found so far are the example's
            results.append(result)
            if failed is not None:
                failures.append(failed)
        if failures:
            raise self._all_of(failures)
        return results

    def _all_of(self, failures: list):
        """One exception for every failing combination: the first one's class, listing them all."""
        first = failures[0]
        if len(failures) == 1:
            return first
        combined = type(first)(first.scenario, first.result, first.replay, also=failures[1:])
        if self.options.current is not None:
            self.options.current.last_failure = combined
        return combined

    def _one(self, scenario, combo, backend: str, fail_on: tuple):
        """One combination's case: (its CaseResult, its ScenarioFailed or None)."""
        __tracebackhide__ = True
        from dataclasses import replace

        from ..fuzz.judge import failure_class
        from ..runner.run import replay_command

        test = self.options.current
        key = f"{combo}\n{scenario.to_yaml()}"
        prop = in_property_test()
        if test is not None and prop:
            spent = test.may_run(key)
            if spent:
                test.stopped = f"{spent} spent after {test.cases} cases"
                raise BudgetSpent(spent)
        if backend != scenario.backend or (self.options.io is not None and self.options.io != scenario.io):
            scenario = replace(scenario, backend=backend, io=self.options.io or scenario.io)  # replays alone
        case_dir = self.options.case_dir(f"{scenario.name}-{combo}")
        result = run_case(self.options, scenario, combo, case_dir, backend, f"scenario {scenario.name!r} [{combo}]")
        replay = result.replay or replay_command(os.path.join(case_dir, "scenario.yaml"), combo, backend)
        failed = failure_class(result)(scenario, result, replay) if result.verdict in fail_on else None
        faults = faults_in(scenario)
        if test is not None:
            test.record(key, result, replay, failed, faults)
        if prop:
            tell_hypothesis(events_of(faults, result.verdict))
        return result, failed


@pytest.fixture(scope="session")
def resilience_options(pytestconfig) -> ResilienceOptions:
    """What --resilience-* selected: combos, max_world, backend, out."""
    return options_of(pytestconfig)


@pytest.fixture(scope="session")
def resilience_run_dir(resilience_options) -> str:
    """The session's run folder (per pytest-xdist worker): evidence of every case run through the plugin."""
    return resilience_options.run_dir()


@pytest.fixture(scope="session")
def resilience_backend(resilience_options) -> BackendUnderTest:
    """The implementation under test (--resilience-backend, default reference) and the selected combos
    it declares."""
    from ..vocab.combos import valid_combinations

    return BackendUnderTest(
        resilience_options.backend or "reference", tuple(resilience_options.selected(valid_combinations()))
    )


@pytest.fixture(scope="session")
def resilience_launcher(resilience_options) -> RankLauncher:
    """Start rank processes: launch(fn, world, args=..., timeout=...) -> results in rank order."""
    return RankLauncher(resilience_options)


@pytest.fixture(scope="session")
def resilience_run(resilience_options) -> ScenarioRunner:
    """Run a scenario on real ranks, every selected combination, and raise one ScenarioFailed (evidence and
    replay of each failing combination) on FAIL, UNKNOWN or UNPROBED (FAIL or UNKNOWN in a property test)."""
    return ScenarioRunner(resilience_options)


@pytest.fixture(scope="session")
def resilience_job(resilience_run_dir):
    """Run a training command under faults (`resilience job`): every column by default, raising one
    JobFailed with each failing column's detail and replay."""
    from .job_trial import JobTrial

    return JobTrial(resilience_run_dir)


@pytest.fixture(scope="session")
def resilience_combo(request):
    """One combination (resilience.vocab.Combination) of the implementation under test: a test that takes
    it runs once per combination --resilience-combos selects and the backend's factory declares."""
    return request.param
