"""pytest plugin (entry point `pytest11: resilience`): run checkpoint resilience tests from pytest.

- Scenario YAML files become test items, one per scenario x combination, when pytest is pointed at
  them: `pytest scenarios/` (any folder with `scenarios` in its path, or a .yaml file named on the
  command line). A failing item shows the verdict, each checker's evidence and the replay command.
- Fixtures (session-scoped, so @given tests can use them): `resilience_run` runs a scenario on real
  ranks, every selected combination, and then raises once with the evidence of each failing one (FAIL,
  UNKNOWN or UNPROBED; inside @given FAIL or UNKNOWN, an UNPROBED example being a gap in the search);
  `resilience_launcher` starts rank processes;
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
command and evidence folder are properties of each scenario item and of each test using resilience_run
(with one `resilience_case[COMBO]` property per combination it ran).
This module imports nothing heavy: torch loads only when a scenario or a rank actually runs.

The hooks are here; the rest by job: the options (options.py), scenario files as items (collection.py), the
fixtures (fixtures.py, held by this module so pytest registers them), one case judged into the session's run
folder (case_run.py), that folder (session.py), and a property test's budgets (budget.py)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from ..fuzz import profiles  # noqa: F401  (registers the Hypothesis profiles ci, dev and fuzz)
from .budget import BudgetSpent, FrameworkBroke, TestRun
from .case_run import xfail_reason
from .collection import ResilienceWarning, ScenarioFile, ScenarioItem, combo_id, scenario_file
from .fixtures import (
    BackendUnderTest,
    RankLauncher,
    ScenarioRunner,
    resilience_backend,
    resilience_combo,
    resilience_job,
    resilience_launcher,
    resilience_options,
    resilience_run,
    resilience_run_dir,
)
from .options import OPTIONS, ResilienceOptions, add_options, options_of, read_options
from .session import WORKER_INPUT, finish, session_coverage


def pytest_addoption(parser):
    add_options(parser)


def pytest_configure(config):
    config.addinivalue_line("markers", "multiprocess: starts real rank processes")
    config.addinivalue_line("markers", "slow: long runs (fuzzing, large worlds); deselect with -m 'not slow'")
    config.stash[OPTIONS] = read_options(config)
    if config.pluginmanager.hasplugin("xdist"):
        config.pluginmanager.register(_XdistController(config.stash[OPTIONS]), "resilience-xdist")


class _XdistController:
    """On the xdist controller: every worker appends its cases under the one session folder."""

    def __init__(self, options: ResilienceOptions):
        self.options = options

    def pytest_configure_node(self, node):
        node.workerinput[WORKER_INPUT] = self.options.session.base()
        self.options.session.shared = self.options.session.base()


def pytest_report_header(config):
    o = config.stash.get(OPTIONS, None)
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
    o = session.config.stash.get(OPTIONS, None)
    if o is None:
        return
    o.close_stores()  # the object stores the session started, stopped with nothing left
    done = finish(o.session, controller=not hasattr(session.config, "workerinput"))
    if done is not None:
        session.config.stash[_FINISHED] = done


def pytest_terminal_summary(terminalreporter, config):
    done = config.stash.get(_FINISHED, None)
    if done is not None:
        from ..verdicts import summary_line

        folder, rows = done
        terminalreporter.write_line(
            f"resilience: {len(rows)} cases, {summary_line(r.verdict for r in rows)}; "
            f"report {os.path.join(folder, 'report.html')}"
        )
        for line in session_coverage(folder, rows):
            terminalreporter.write_line(f"resilience {line}")


def pytest_generate_tests(metafunc):
    if "resilience_combo" in metafunc.fixturenames:
        from ..vocab.combos import valid_combinations

        combos = options_of(metafunc.config).selected(valid_combinations())
        # session scope, as every fixture of the plugin: @given tests can take it
        metafunc.parametrize(
            "resilience_combo", combos, ids=[combo_id(c) for c in combos], indirect=True, scope="session"
        )


@pytest.hookimpl(wrapper=True)
def pytest_pyfunc_call(pyfuncitem):
    """Around each test function: the cases it runs through resilience_run, its budgets, and what ends it."""
    options = pyfuncitem.config.stash.get(OPTIONS, None)
    if options is None or "resilience_run" not in getattr(pyfuncitem, "fixturenames", ()):
        return (yield)
    test = options.current = TestRun(
        options.time_budget, options.shrink_budget, test=pyfuncitem.nodeid, expected_failure=xfail_reason(pyfuncitem)
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


def pytest_collect_file(file_path: Path, parent):
    return scenario_file(file_path, parent)


# pytest finds a plugin's hooks and fixtures by name in the module its entry point names: the fixtures
# defined in fixtures.py are the plugin's because this module holds them
__all__ = [
    "BackendUnderTest",
    "RankLauncher",
    "ResilienceOptions",
    "ResilienceWarning",
    "ScenarioFile",
    "ScenarioItem",
    "ScenarioRunner",
    "options_of",
    "resilience_backend",
    "resilience_combo",
    "resilience_job",
    "resilience_launcher",
    "resilience_options",
    "resilience_run",
    "resilience_run_dir",
]
