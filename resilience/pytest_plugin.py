"""pytest plugin (entry point `pytest11: resilience`): run checkpoint resilience tests from pytest.

- Scenario YAML files become test items, one per scenario x combination, when pytest is pointed at
  them: `pytest scenarios/` (any folder with `scenarios` in its path, or a .yaml file named on the
  command line). A failing item shows the verdict, each checker's evidence and the replay command.
- Fixtures (session-scoped, so @given tests can use them): `resilience_run` runs a scenario on real
  ranks and raises with the evidence on FAIL or UNKNOWN; `resilience_launcher` starts rank processes;
  `resilience_backend` is the implementation under test; `resilience_run_dir` the run folder;
  `resilience_combo` parametrizes a test over the selected combinations.
- Markers: `multiprocess` (added to every test that starts ranks through the plugin) and `slow`.
- Options, in one group: --resilience-combos, --resilience-max-world, --resilience-backend,
  --resilience-profile, --resilience-out. A bad value stops pytest with one usage error.
- Hypothesis profiles `ci`, `dev` and `fuzz` are registered on import (resilience.fuzz.profiles).

Works with pytest-xdist (each worker keeps its own run folder) and with --junitxml (verdict, replay
command and evidence folder are recorded as properties of each scenario item). This module imports
nothing heavy: torch loads only when a scenario or a rank actually runs."""
from __future__ import annotations

import os
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from .fuzz import profiles  # noqa: F401  (registers the Hypothesis profiles ci, dev and fuzz)
from .status import FAILING  # what fails a scenario item, as every command counts it

SCENARIO_SUFFIXES = (".yaml", ".yml")
SCENARIO_FOLDER = "scenarios"


# ---- option values ---------------------------------------------------------------------------------
def parse_combos(text: str) -> list:
    """'all', or combinations separated by commas or spaces: GLOBAL/torch_dist/sync,LOCAL/torch/sync."""
    items = [t for t in re.split(r"[,\s]+", text.strip()) if t]
    if not items:
        raise pytest.UsageError("--resilience-combos: empty; give TYPE/format/io[,...] or all")
    from .errors import ConfigError
    from .vocab.combos import Combination, valid_combinations
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
    from .errors import ConfigError
    from .runner.adapters import parse_backend as parse
    try:
        return parse(text.strip())
    except ConfigError as e:
        raise pytest.UsageError(f"--resilience-backend: {e.problem}; {e.fix}") from None


def parse_profile(text: str) -> str:
    """A Hypothesis profile name; whether it exists is checked once conftest files had their say."""
    if not re.fullmatch(r"[\w.-]+", text):
        raise pytest.UsageError(f"--resilience-profile: {text!r} is not a profile name; use ci, dev or fuzz")
    return text


def pytest_addoption(parser):
    group = parser.getgroup("resilience", "checkpoint resilience (resilience.pytest_plugin)")
    group.addoption("--resilience-combos", type=parse_combos, default=None, metavar="TYPE/format/io[,...]",
                    help="combinations for scenario files and resilience_combo tests (default: all six valid)")
    group.addoption("--resilience-max-world", type=parse_max_world, default=None, metavar="W",
                    help="skip scenarios and rank launches needing more than W ranks (default: no limit)")
    group.addoption("--resilience-backend", type=parse_backend, default=None, metavar="NAME",
                    help="implementation under test: reference, broken:NAME or package.module:factory "
                         "(default: each scenario's own, else reference)")
    group.addoption("--resilience-io", choices=("seam", "fuse", "auto"), default=None,
                    help="how faults reach the implementation's I/O: seam (in process), fuse (a fault-injecting "
                         "file system under every writer) or auto (default: each scenario's io, else auto: the seam "
                         "for backends that declare io_through_seam, the file system otherwise)")
    group.addoption("--resilience-profile", type=parse_profile, default=None, metavar="NAME",
                    help="load this Hypothesis settings profile: ci, dev, fuzz, or one a conftest registers")
    group.addoption("--resilience-out", default=None, metavar="DIR",
                    help="keep the evidence of the session in a run folder under DIR (default: pytest's "
                         "temporary directory)")


# ---- session state ------------------------------------------------------------------------------------
@dataclass
class ResilienceOptions:
    """What the command line selected; `run_dir()` makes the session's run folder on first use."""

    combos: list | None
    max_world: int | None
    backend: str | None
    out: str | None
    _config: Any = field(repr=False, default=None)
    io: str | None = None
    _run_dir: str | None = field(repr=False, default=None)
    _cases: int = field(repr=False, default=0)

    def run_dir(self) -> str:
        if self._run_dir is None:
            worker = os.environ.get("PYTEST_XDIST_WORKER", "main")
            if self.out:
                from .report import make_run_dir
                self._run_dir = make_run_dir(self.out, f"pytest-{worker}")
            else:
                factory = getattr(self._config, "_tmp_path_factory", None)
                if factory is not None:
                    self._run_dir = str(factory.mktemp(f"resilience-{worker}", numbered=True))
                else:  # the tmp_path plugin is disabled
                    import tempfile
                    self._run_dir = tempfile.mkdtemp(prefix=f"resilience-{worker}-")
        return self._run_dir

    def case_dir(self, name: str) -> str:
        self._cases += 1
        safe = re.sub(r"[^A-Za-z0-9_.-]+", "-", name).strip("-")[:120] or "case"
        return os.path.join(self.run_dir(), "cases", f"{self._cases:04d}-{safe}")

    def selected(self, combos) -> list:
        return [c for c in combos if self.combos is None or c in self.combos]


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
            raise pytest.UsageError(f"--resilience-profile: no Hypothesis profile {profile!r}; use ci, dev, fuzz "
                                    "or register it in a conftest.py") from None
    backend = config.getoption("resilience_backend")
    if backend and backend != "reference" and not backend.startswith("broken:"):
        from .errors import ConfigError
        from .runner.adapters import make_backend
        combos = config.getoption("resilience_combos")
        try:
            from .vocab.combos import valid_combinations
            make_backend(backend, (combos or valid_combinations())[0])
        except ConfigError as e:
            raise pytest.UsageError(f"--resilience-backend: {e}") from None
    config.stash[_OPTIONS] = ResilienceOptions(config.getoption("resilience_combos"),
                                               config.getoption("resilience_max_world"), backend,
                                               config.getoption("resilience_out"), config,
                                               config.getoption("resilience_io"))


def pytest_report_header(config):
    o = config.stash.get(_OPTIONS, None)
    if o is None or (o.combos is None and o.max_world is None and o.backend is None):
        return None
    combos = ", ".join(map(str, o.combos)) if o.combos else "all"
    return (f"resilience: backend {o.backend or 'per scenario'}; combinations {combos}; "
            f"max world {o.max_world or 'no limit'}")


def pytest_terminal_summary(terminalreporter, config):
    o = config.stash.get(_OPTIONS, None)
    if o is not None and o._run_dir is not None:
        terminalreporter.write_line(f"resilience: evidence in {o._run_dir}")


# ---- fixtures ----------------------------------------------------------------------------------------
@dataclass(frozen=True)
class BackendUnderTest:
    """The checkpoint implementation the session tests; `make(combo)` builds it for one combination."""

    name: str
    combos: tuple

    def make(self, combo):
        from .runner.adapters import make_backend
        return make_backend(self.name, combo)


class RankLauncher:
    """`launch(fn, world, args=(), kwargs=None, timeout=120)`: fn(ctx, *args, **kwargs) on `world` forked
    rank processes (torch.distributed on gloo); their results in rank order, or RankFailure with
    `failures: {rank: ...}`. Skips the test when world exceeds --resilience-max-world."""

    def __init__(self, options: ResilienceOptions):
        self.options = options

    def __call__(self, fn: Callable, world: int, *, args: tuple = (), kwargs: dict | None = None,
                 timeout: float = 120.0) -> list:
        if self.options.max_world is not None and world > self.options.max_world:
            pytest.skip(f"needs {world} ranks; --resilience-max-world is {self.options.max_world}")
        from .launch import run_ranks
        return run_ranks(fn, world, args=args, kwargs=kwargs, timeout=timeout,
                         log_dir=self.options.case_dir(getattr(fn, "__name__", "ranks")))


class ScenarioRunner:
    """`run(scenario, combos=None, fail_on=("FAIL", "UNKNOWN"))`: run a Scenario (or a YAML file) for
    each of its combinations selected by --resilience-combos (and `combos`), with the backend under
    test; the CaseResults, or ScenarioFailed with the evidence and the replay command."""

    def __init__(self, options: ResilienceOptions):
        self.options = options

    def __call__(self, scenario, combos=None, *, fail_on=("FAIL", "UNKNOWN")) -> list:
        from .fuzz.judge import judge
        from .runner.scenario import Scenario, load_file
        if not isinstance(scenario, Scenario):
            scenario = load_file(scenario)
        chosen = self.options.selected(scenario.combinations)
        if combos is not None:
            from .vocab.combos import Combination
            wanted = [c if isinstance(c, Combination) else Combination.parse(c) for c in combos]
            chosen = [c for c in chosen if c in wanted]
        return [judge(scenario, combo, backend=self.options.backend, io=self.options.io,
                      case_dir=self.options.case_dir(f"{scenario.name}-{combo}"), fail_on=fail_on)
                for combo in chosen]


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
    """The implementation under test (--resilience-backend, default reference) and the selected combos."""
    from .vocab.combos import valid_combinations
    return BackendUnderTest(resilience_options.backend or "reference",
                            tuple(resilience_options.combos or valid_combinations()))


@pytest.fixture(scope="session")
def resilience_launcher(resilience_options) -> RankLauncher:
    """Start rank processes: launch(fn, world, args=..., timeout=...) -> results in rank order."""
    return RankLauncher(resilience_options)


@pytest.fixture(scope="session")
def resilience_run(resilience_options) -> ScenarioRunner:
    """Run a scenario on real ranks and raise ScenarioFailed (evidence + replay) on FAIL or UNKNOWN."""
    return ScenarioRunner(resilience_options)


def pytest_generate_tests(metafunc):
    if "resilience_combo" in metafunc.fixturenames:
        from .vocab.combos import valid_combinations
        combos = options_of(metafunc.config).combos or valid_combinations()
        metafunc.parametrize("resilience_combo", combos, ids=[combo_id(c) for c in combos])


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
        from .errors import ConfigError
        from .runner.scenario import load_file
        try:
            scenario = load_file(self.path)
        except ConfigError as e:
            raise self.CollectError(f"{e}") from None
        for combo in options_of(self.config).selected(scenario.combinations):
            yield ScenarioItem.from_parent(self, name=f"{scenario.name}[{combo_id(combo)}]", scenario=scenario,
                                           combo=combo)


def _world_needed(scenario) -> int:
    from .state import Topology
    worlds = [scenario.topology.world]
    for step in scenario.steps:
        if step.kind == "resume" and step.args.get("topology", "same") != "same":
            worlds.append(Topology.parse(step.args["topology"]).world)
    return max(worlds)


class ScenarioItem(pytest.Item):
    """One scenario x combination, run on real ranks with the backend under test."""

    def __init__(self, *, scenario, combo, **kw):
        super().__init__(**kw)
        self.scenario, self.combo = scenario, combo
        self.add_marker(pytest.mark.multiprocess)

    def runtest(self):
        from .fuzz.judge import failure_class
        from .runner.run import replay_command, run_case
        options = options_of(self.config)
        world = _world_needed(self.scenario)
        if options.max_world is not None and world > options.max_world:
            pytest.skip(f"needs {world} ranks; --resilience-max-world is {options.max_world}")
        backend = options.backend or self.scenario.backend
        result = run_case(self.scenario, self.combo, options.case_dir(f"{self.scenario.name}-{self.combo}"),
                          backend=backend, io=options.io)
        replay = replay_command(str(self.path), self.combo, backend, options.io)
        self.user_properties += [("verdict", str(result.verdict)), ("replay", replay), ("evidence", result.case_dir)]
        if result.verdict in FAILING:
            raise failure_class(result)(self.scenario, result, replay)

    def repr_failure(self, excinfo, style=None):
        from .fuzz.judge import ScenarioFailed
        if isinstance(excinfo.value, ScenarioFailed):
            return str(excinfo.value)
        return super().repr_failure(excinfo, style=style)

    def reportinfo(self):
        return self.path, None, f"scenario {self.scenario.name} [{self.combo}]"
