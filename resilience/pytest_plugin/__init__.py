"""pytest plugin (entry point `pytest11: resilience`): run checkpoint resilience tests from pytest.

- Scenario YAML files become test items, one per scenario x combination, when pytest is pointed at
  them: `pytest scenarios/` (any folder with `scenarios` in its path, or a .yaml file named on the
  command line). A failing item shows the verdict, each checker's evidence and the replay command.
- Fixtures (session-scoped, so @given tests can use them): `resilience_run` runs a scenario on real
  ranks and raises with the evidence on FAIL or UNKNOWN; `resilience_launcher` starts rank processes;
  `resilience_backend` is the implementation under test; `resilience_run_dir` the run folder;
  `resilience_combo` parametrizes a test over the selected combinations.
- Markers: `multiprocess` (added to every test that starts ranks through the plugin) and `slow`.
- Options, in one group: --resilience-combos, --resilience-max-world, --resilience-backend, --resilience-io,
  --resilience-profile, --resilience-out, --resilience-time-budget, --resilience-shrink-budget. A bad value
  stops pytest with one usage error.
- Only the combinations the backend's factory declares run (others are not collected; a scenario left with
  none is one skipped item saying why), judged by the contract it states (docs/adapters.md). A case with
  nothing that applies to the backend (N/A) is skipped with the reason; UNPROBED and UNKNOWN fail, as in
  every command (status.FAILING).
- A framework error is one short paragraph naming the case folder (the traceback is kept there), apart
  from the implementation's failures; property tests stop at their time budget and shrink budget.
- Hypothesis profiles `ci`, `dev` and `fuzz` are registered on import (resilience.fuzz.profiles).

One run folder per session, also under pytest-xdist (each worker appends to a subfolder; the controller
writes one report over all of them: report.html, results.json, junit.xml). With --junitxml, verdict, replay
command and evidence folder are properties of each scenario item and of each test using resilience_run.
This module imports nothing heavy: torch loads only when a scenario or a rank actually runs."""

from __future__ import annotations

import os
import re
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from ..fuzz import profiles  # noqa: F401  (registers the Hypothesis profiles ci, dev and fuzz)
from ..fuzz.events import events_of, faults_in, tell_hypothesis
from ..status import FAILING, NA, WARN  # what fails a scenario item, as every command counts it
from .budget import (
    BudgetSpent,
    FrameworkBroke,
    TestRun,
    framework_paragraph,
    in_property_test,
)
from .session import WORKER_INPUT, SessionFolder, finish

SCENARIO_SUFFIXES = (".yaml", ".yml")
SCENARIO_FOLDER = "scenarios"


class ResilienceWarning(UserWarning):
    """A case that passed with a WARN finding (an error on a damaged file that does not name it)."""


# ---- option values ---------------------------------------------------------------------------------
def parse_combos(text: str) -> list:
    """'all', or combinations separated by commas or spaces: GLOBAL/torch_dist/sync,LOCAL/torch/sync."""
    items = [t for t in re.split(r"[,\s]+", text.strip()) if t]
    if not items:
        raise pytest.UsageError("--resilience-combos: empty; give TYPE/format/io[,...] or all")
    from ..errors import ConfigError
    from ..vocab.combos import Combination, valid_combinations

    if items == ["all"]:
        return valid_combinations()
    out = []
    for item in items:
        try:
            out.append(Combination.parse(item))
        except ConfigError as e:
            raise pytest.UsageError(f"--resilience-combos: {e}") from None
    return out


def parse_max_world(text: str) -> int:
    """A whole number of ranks, 1..64."""
    try:
        value = int(text)
    except ValueError:
        raise pytest.UsageError(f"--resilience-max-world: must be a whole number of ranks, got {text!r}") from None
    if not 1 <= value <= 64:
        raise pytest.UsageError(f"--resilience-max-world: must be between 1 and 64, got {value}")
    return value


def parse_backend(text: str) -> str:
    """'reference', 'broken:NAME', an alias or 'package.module:factory', read as the runner reads it."""
    from ..errors import ConfigError
    from ..runner.adapters import parse_backend as parse

    try:
        return parse(text.strip())
    except ConfigError as e:
        raise pytest.UsageError(f"--resilience-backend: {e.problem}; {e.fix}") from None


def parse_seconds(text: str) -> float:
    """A positive number of seconds."""
    try:
        value = float(text)
    except ValueError:
        raise pytest.UsageError(f"must be a number of seconds, got {text!r}") from None
    if not value > 0:
        raise pytest.UsageError(f"must be more than 0 seconds, got {text}")
    return value


def _seconds_option(name: str):
    def parse(text: str) -> float:
        try:
            return parse_seconds(text)
        except pytest.UsageError as e:
            raise pytest.UsageError(f"{name}: {e}") from None

    return parse


def parse_profile(text: str) -> str:
    """A Hypothesis profile name; whether it exists is checked once conftest files had their say."""
    if not re.fullmatch(r"[\w.-]+", text):
        raise pytest.UsageError(f"--resilience-profile: {text!r} is not a profile name; use ci, dev or fuzz")
    return text


def pytest_addoption(parser):
    group = parser.getgroup("resilience", "checkpoint resilience (resilience.pytest_plugin)")
    group.addoption(
        "--resilience-combos",
        type=parse_combos,
        default=None,
        metavar="TYPE/format/io[,...]",
        help="combinations for scenario files and resilience_combo tests (default: all six valid; "
        "always only those the backend declares)",
    )
    group.addoption(
        "--resilience-max-world",
        type=parse_max_world,
        default=None,
        metavar="W",
        help="skip scenarios and rank launches needing more than W ranks (default: no limit)",
    )
    group.addoption(
        "--resilience-backend",
        type=parse_backend,
        default=None,
        metavar="NAME",
        help="implementation under test: reference, broken:NAME or package.module:factory "
        "(default: each scenario's own, else reference)",
    )
    group.addoption(
        "--resilience-io",
        choices=("seam", "fuse", "auto"),
        default=None,
        help="how faults reach the implementation's I/O: seam (in process), fuse (a fault-injecting "
        "file system under every writer) or auto (default: each scenario's io, else auto: the seam "
        "for backends that declare io_through_seam, the file system otherwise)",
    )
    group.addoption(
        "--resilience-profile",
        type=parse_profile,
        default=None,
        metavar="NAME",
        help="load this Hypothesis settings profile: ci, dev, fuzz, or one a conftest registers",
    )
    group.addoption(
        "--resilience-out",
        default=None,
        metavar="DIR",
        help="keep the evidence of the session in a run folder under DIR (default: pytest's temporary directory)",
    )
    group.addoption(
        "--resilience-time-budget",
        type=_seconds_option("--resilience-time-budget"),
        default=None,
        metavar="S",
        help="a property test (Hypothesis) that runs scenarios stops drawing examples "
        "after S seconds and passes if none failed (default: no limit)",
    )
    group.addoption(
        "--resilience-shrink-budget",
        type=_seconds_option("--resilience-shrink-budget"),
        default=120.0,
        metavar="S",
        help="once an example failed, a property test shrinks it for at most S seconds, "
        "then reports the smallest failure found so far (default: 120)",
    )


# ---- session state ------------------------------------------------------------------------------------
@dataclass
class ResilienceOptions:
    """What the command line selected; `session` is the run folder, made on first use."""

    combos: list | None
    max_world: int | None
    backend: str | None
    out: str | None
    _config: Any = field(repr=False, default=None)
    io: str | None = None
    time_budget: float | None = None
    shrink_budget: float | None = 120.0
    session: SessionFolder = field(default_factory=lambda: SessionFolder(None))
    current: TestRun | None = field(repr=False, default=None)  # the test item running scenarios now
    _declared: dict = field(repr=False, default_factory=dict)

    def run_dir(self) -> str:
        return self.session.path

    def case_dir(self, name: str) -> str:
        return self.session.case_dir(name)

    def selected(self, combos, backend: str | None = None) -> list:
        """`combos` as --resilience-combos narrows them, and as the backend's factory declares them."""
        declared = self.declared(backend or self.backend or "reference")
        return [c for c in combos if (self.combos is None or c in self.combos) and (declared is None or c in declared)]

    def declared(self, backend: str) -> list | None:
        if backend not in self._declared:
            from ..runner.adapters import supported_combinations

            self._declared[backend] = supported_combinations(backend)
        return self._declared[backend]


_OPTIONS = pytest.StashKey[ResilienceOptions]()


def options_of(config) -> ResilienceOptions:
    return config.stash[_OPTIONS]


def pytest_configure(config):
    config.addinivalue_line("markers", "multiprocess: starts real rank processes")
    config.addinivalue_line("markers", "slow: long runs (fuzzing, large worlds); deselect with -m 'not slow'")
    profile = config.getoption("resilience_profile")
    if profile:
        from hypothesis import settings
        from hypothesis.errors import InvalidArgument

        try:
            settings.load_profile(profile)
        except InvalidArgument:
            raise pytest.UsageError(
                f"--resilience-profile: no Hypothesis profile {profile!r}; use ci, dev, fuzz "
                "or register it in a conftest.py"
            ) from None
    backend = config.getoption("resilience_backend")
    if backend and backend != "reference" and not backend.startswith("broken:"):
        from ..errors import ConfigError
        from ..runner.adapters import make_backend, supported_combinations

        combos = config.getoption("resilience_combos")
        try:
            from ..vocab.combos import valid_combinations

            declared = supported_combinations(backend)
            either = [c for c in (combos or declared or valid_combinations()) if declared is None or c in declared]
            make_backend(backend, (either or declared or valid_combinations())[0])
        except ConfigError as e:
            raise pytest.UsageError(f"--resilience-backend: {e}") from None
    worker = getattr(config, "workerinput", None)
    session = SessionFolder(
        config.getoption("resilience_out"),
        config,
        backend=backend or "per scenario",
        shared=(worker or {}).get(WORKER_INPUT),
        worker=os.environ.get("PYTEST_XDIST_WORKER", "main"),
    )
    config.stash[_OPTIONS] = ResilienceOptions(
        config.getoption("resilience_combos"),
        config.getoption("resilience_max_world"),
        backend,
        config.getoption("resilience_out"),
        config,
        config.getoption("resilience_io"),
        config.getoption("resilience_time_budget"),
        config.getoption("resilience_shrink_budget"),
        session,
    )
    if config.pluginmanager.hasplugin("xdist"):
        config.pluginmanager.register(_XdistController(config.stash[_OPTIONS]), "resilience-xdist")


class _XdistController:
    """On the xdist controller: every worker appends its cases under the one session folder."""

    def __init__(self, options: ResilienceOptions):
        self.options = options

    def pytest_configure_node(self, node):
        node.workerinput[WORKER_INPUT] = self.options.session.base()
        self.options.session.shared = self.options.session.base()


def pytest_report_header(config):
    o = config.stash.get(_OPTIONS, None)
    if o is None or (o.combos is None and o.max_world is None and o.backend is None):
        return None
    declared = o.declared(o.backend) if o.backend else None
    combos = ", ".join(map(str, o.selected(o.combos or declared or []))) if (o.combos or declared) else "all"
    return (
        f"resilience: backend {o.backend or 'per scenario'}; combinations {combos}; "
        f"max world {o.max_world or 'no limit'}"
    )


_FINISHED = pytest.StashKey[tuple]()


def pytest_sessionfinish(session):
    o = session.config.stash.get(_OPTIONS, None)
    if o is None:
        return
    done = finish(o.session, controller=not hasattr(session.config, "workerinput"))
    if done is not None:
        session.config.stash[_FINISHED] = done


def pytest_terminal_summary(terminalreporter, config):
    done = config.stash.get(_FINISHED, None)
    if done is not None:
        from ..status import summary_line

        folder, rows = done
        terminalreporter.write_line(
            f"resilience: {len(rows)} cases, {summary_line(r.verdict for r in rows)}; "
            f"report {os.path.join(folder, 'report.html')}"
        )


# ---- fixtures ----------------------------------------------------------------------------------------
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
    """`run(scenario, combos=None, fail_on=FAILING)`: run a Scenario (or a YAML file) for each of its
    combinations selected by --resilience-combos (and `combos`) that the backend under test declares; the
    CaseResults, or ScenarioFailed with the evidence and the replay command. Inside a property test the
    time and shrink budgets apply and Hypothesis events name the faults drawn."""

    def __init__(self, options: ResilienceOptions):
        self.options = options

    def __call__(self, scenario, combos=None, *, fail_on=FAILING) -> list:
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
        return [self._one(scenario, combo, backend, tuple(fail_on)) for combo in chosen]

    def _one(self, scenario, combo, backend: str, fail_on: tuple):
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
        result = _run_case(self.options, scenario, combo, case_dir, backend, f"scenario {scenario.name!r} [{combo}]")
        replay = result.replay or replay_command(os.path.join(case_dir, "scenario.yaml"), combo, backend)
        failed = failure_class(result)(scenario, result, replay) if result.verdict in fail_on else None
        faults = faults_in(scenario)
        if test is not None:
            test.record(key, result, replay, failed, faults)
        if prop:
            tell_hypothesis(events_of(faults, result.verdict))
        if failed is not None:
            raise failed
        return result


def _run_case(
    options: ResilienceOptions,
    scenario,
    combo,
    case_dir: str,
    backend: str,
    where: str,
    *,
    test: str = "",
    expected_failure: str = "",
):
    """The case judged as every command judges one (runner.case_loop.judge_case), its row in the
    session's run folder; a framework error raises FrameworkBroke."""
    __tracebackhide__ = True
    from ..runner.case_loop import CaseSpec, judge_case

    current = options.current
    if current is not None:  # a test function's case: named by its test, and xfail when the test is
        test, expected_failure = test or current.test, expected_failure or current.expected_failure
    extra = {"test": test, **({"expected_failure": expected_failure} if expected_failure else {})}
    judged = judge_case(CaseSpec(scenario, combo, case_dir, backend, extra=extra, io=options.io))
    options.session.append(judged.row)
    if judged.error is not None:  # the framework broke: one paragraph, the traceback in the case folder
        trace = judged.row.detail.rsplit("(traceback: ", 1)[-1].rstrip(")")
        raise FrameworkBroke(framework_paragraph(judged.error, where, case_dir, trace)) from None
    return judged.result


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
    """Run a scenario on real ranks and raise ScenarioFailed (evidence + replay) on FAIL, UNKNOWN or UNPROBED."""
    return ScenarioRunner(resilience_options)


@pytest.fixture(scope="session")
def resilience_combo(request):
    """One combination (resilience.vocab.Combination) of the implementation under test: a test that takes
    it runs once per combination --resilience-combos selects and the backend's factory declares."""
    return request.param


def pytest_generate_tests(metafunc):
    if "resilience_combo" in metafunc.fixturenames:
        from ..vocab.combos import valid_combinations

        combos = options_of(metafunc.config).selected(valid_combinations())
        # session scope, as every fixture of the plugin: @given tests can take it
        metafunc.parametrize(
            "resilience_combo", combos, ids=[combo_id(c) for c in combos], indirect=True, scope="session"
        )


def _xfail(item) -> str:
    """Why the item is expected to fail (its xfail marker's reason, or "xfail"), "" when it is not."""
    marker = item.get_closest_marker("xfail")
    if marker is None:
        return ""
    return str(marker.kwargs.get("reason") or (marker.args[1] if len(marker.args) > 1 else "") or "xfail")


@pytest.hookimpl(wrapper=True)
def pytest_pyfunc_call(pyfuncitem):
    """Around each test function: the cases it runs through resilience_run, its budgets, and what ends it."""
    options = pyfuncitem.config.stash.get(_OPTIONS, None)
    if options is None or "resilience_run" not in getattr(pyfuncitem, "fixturenames", ()):
        return (yield)
    test = options.current = TestRun(
        options.time_budget, options.shrink_budget, test=pyfuncitem.nodeid, expected_failure=_xfail(pyfuncitem)
    )
    try:
        return (yield)
    except BudgetSpent:
        if test.last_failure is not None:  # the shrink budget ended it: the smallest failure so far
            pytest.fail(f"{test.last_failure}\n\n(shrinking stopped: {test.stopped})", pytrace=False)
        return True  # the time budget ended it and nothing failed: passed, with the count in JUnit
    except FrameworkBroke as e:
        pytest.fail(str(e), pytrace=False)
    finally:
        options.current = None
        pyfuncitem.user_properties += test.properties()


def pytest_collection_modifyitems(config, items):
    for item in items:
        if {"resilience_launcher", "resilience_run"} & set(getattr(item, "fixturenames", ())):
            item.add_marker(pytest.mark.multiprocess)


def combo_id(combo) -> str:
    return str(combo).replace("/", "-")


# ---- scenario files as test items ---------------------------------------------------------------------
_ROOTS = pytest.StashKey[list]()


def _scenario_roots(config) -> list[Path]:
    """Paths named on the command line (or in testpaths) that hold scenarios: .yaml files, and folders
    with `scenarios` in their path. Test data elsewhere (a tests/ tree) is never collected."""
    if _ROOTS not in config.stash:
        base = config.invocation_params.dir
        roots = []
        for arg in config.args:
            p = (base / str(arg).split("::", 1)[0]).resolve()
            if (p.is_file() and p.suffix in SCENARIO_SUFFIXES) or (p.is_dir() and SCENARIO_FOLDER in p.parts):
                roots.append(p)
        config.stash[_ROOTS] = roots
    return config.stash[_ROOTS]


def pytest_collect_file(file_path: Path, parent):
    if file_path.suffix not in SCENARIO_SUFFIXES:
        return None
    path = file_path.resolve()
    if any(path == r or r in path.parents for r in _scenario_roots(parent.config)):
        return ScenarioFile.from_parent(parent, path=file_path)
    return None


class ScenarioFile(pytest.File):
    """A scenario YAML file: one item per selected combination. A file that does not validate is a
    collection error naming the file, line and field."""

    def collect(self):
        from ..errors import ConfigError
        from ..runner.scenario import load_file

        try:
            scenario = load_file(self.path)
        except ConfigError as e:
            raise self.CollectError(f"{e}") from None
        options = options_of(self.config)
        backend = options.backend or scenario.backend
        combos = options.selected(scenario.combinations, backend)
        for combo in combos:
            yield ScenarioItem.from_parent(
                self, name=f"{scenario.name}[{combo_id(combo)}]", scenario=scenario, combo=combo
            )
        asked = options.selected(scenario.combinations, "reference")  # what --resilience-combos leaves
        if not combos and asked:
            declared = ", ".join(map(str, options.declared(backend) or []))
            why = f"{backend} declares only {declared}; the scenario asks for {', '.join(map(str, asked))}"
            yield ScenarioItem.from_parent(
                self, name=f"{scenario.name}[not-declared]", scenario=scenario, combo=None, skip=why
            )


def _world_needed(scenario) -> int:
    from ..state import Topology

    worlds = [scenario.topology.world]
    for step in scenario.steps:
        if step.kind == "resume" and step.args.get("topology", "same") != "same":
            worlds.append(Topology.parse(step.args["topology"]).world)
    return max(worlds)


class ScenarioItem(pytest.Item):
    """One scenario x combination, run on real ranks with the backend under test."""

    def __init__(self, *, scenario, combo, skip: str = "", **kw):
        super().__init__(**kw)
        self.scenario, self.combo, self.skip = scenario, combo, skip
        self.add_marker(pytest.mark.multiprocess)

    def runtest(self):
        from ..fuzz.judge import failure_class
        from ..runner.run import replay_command

        if self.skip:
            pytest.skip(self.skip)
        options = options_of(self.config)
        world = _world_needed(self.scenario)
        if options.max_world is not None and world > options.max_world:
            pytest.skip(f"needs {world} ranks; --resilience-max-world is {options.max_world}")
        backend = options.backend or self.scenario.backend
        case_dir = options.case_dir(f"{self.scenario.name}-{self.combo}")
        result = _run_case(
            options,
            self.scenario,
            self.combo,
            case_dir,
            backend,
            f"scenario {self.scenario.name!r} [{self.combo}]",
            test=self.nodeid,
            expected_failure=_xfail(self),
        )
        replay = replay_command(str(self.path), self.combo, backend, options.io)
        self.user_properties += [("verdict", str(result.verdict)), ("replay", replay), ("evidence", result.case_dir)]
        if result.verdict in FAILING:
            raise failure_class(result)(self.scenario, result, replay)
        if result.verdict == NA:  # nothing in it applies to this backend: skipped, with the reason
            pytest.skip(f"nothing applies to {backend}: {result.detail}")
        if result.verdict == WARN:  # passed: the finding goes to pytest's warnings summary, with its replay
            warnings.warn(ResilienceWarning(f"{result.detail}; replay: {replay}"), stacklevel=1)

    def repr_failure(self, excinfo, style=None):
        from ..fuzz.judge import ScenarioFailed

        if isinstance(excinfo.value, (ScenarioFailed, FrameworkBroke)):
            return str(excinfo.value)
        return super().repr_failure(excinfo, style=style)

    def reportinfo(self):
        return self.path, None, f"scenario {self.scenario.name} [{self.combo}]"
