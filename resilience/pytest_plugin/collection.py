"""Scenario YAML files collected as test items: one per scenario x combination the backend under test
declares, when pytest is pointed at them (a folder with `scenarios` in its path, or a file named on the
command line); a failing item shows the verdict, each checker's evidence and the replay command."""

from __future__ import annotations

import warnings
from pathlib import Path

import pytest

from ..verdicts import FAILING, NA, WARN  # what fails a scenario item, as every command counts it
from .budget import FrameworkBroke
from .case_run import run_case, xfail_reason
from .options import options_of

SCENARIO_SUFFIXES = (".yaml", ".yml")
SCENARIO_FOLDER = "scenarios"


class ResilienceWarning(UserWarning):
    """A case that passed with a WARN finding (an error on a damaged file that does not name it)."""


def combo_id(combo) -> str:
    """A combination as a test id: GLOBAL-torch_dist-sync."""
    return str(combo).replace("/", "-")


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


def scenario_file(file_path: Path, parent):
    """A ScenarioFile for a YAML file under a scenario root (pytest_collect_file), else None."""
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
        result = run_case(
            options,
            self.scenario,
            self.combo,
            case_dir,
            backend,
            f"scenario {self.scenario.name!r} [{self.combo}]",
            test=self.nodeid,
            expected_failure=xfail_reason(self),
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
