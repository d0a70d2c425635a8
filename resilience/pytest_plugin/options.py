"""The plugin's command-line options: the one option group, the parsers of their values (a bad value is one
pytest.UsageError), and ResilienceOptions, what they selected, kept in the config's stash for the session."""

from __future__ import annotations

import contextlib
import os
import re
from dataclasses import dataclass, field, replace
from typing import Any

import pytest

from .budget import TestRun
from .session import WORKER_INPUT, SessionFolder


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


def _whole_number(option: str, text: str, what: str, most: int) -> int:
    """`text` as a whole number of `what`, 1..`most`; pytest.UsageError naming `option` otherwise."""
    try:
        value = int(text)
    except ValueError:
        raise pytest.UsageError(f"{option}: must be a whole number of {what}, got {text!r}") from None
    if not 1 <= value <= most:
        raise pytest.UsageError(f"{option}: must be between 1 and {most}, got {value}")
    return value


def parse_max_world(text: str) -> int:
    """A whole number of ranks, 1..64."""
    return _whole_number("--resilience-max-world", text, "ranks", 64)


def parse_backend(text: str) -> str:
    """'reference', 'broken:NAME', an alias or 'package.module:factory', read as the runner reads it."""
    from ..errors import ConfigError
    from ..runner.adapters import parse_backend as parse

    try:
        return parse(text.strip())
    except ConfigError as e:
        raise pytest.UsageError(f"--resilience-backend: {e.problem}; {e.fix}") from None


def parse_repeat(text: str) -> int:
    """A whole number of runs of each case, 1..runner.repeats.MAX_REPEAT."""
    from ..runner.repeats import MAX_REPEAT

    return _whole_number("--resilience-repeat", text, "runs", MAX_REPEAT)


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


def add_options(parser) -> None:
    """The plugin's option group (pytest_addoption): every value parsed here, a bad one a usage error."""
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
    _add_storage_options(group)
    group.addoption(
        "--resilience-repeat",
        type=parse_repeat,
        default=1,
        metavar="N",
        help="run each case N times with the same seed, each run in its own folder; a case whose runs "
        "give different verdicts is FLAKY, which fails its test (default: 1)",
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
    _resolved: dict = field(repr=False, default_factory=dict)
    repeat: int = 1  # runs of each case with the same seed (runner.repeats)
    storage: str | None = None  # --resilience-storage: in place of each scenario's
    endpoint_url: str | None = None
    _stores: contextlib.ExitStack = field(repr=False, default_factory=contextlib.ExitStack)
    _opened: set = field(repr=False, default_factory=set)

    def placed(self, scenario):
        """The scenario where --resilience-storage puts its checkpoints, its object store open for the session
        (objectstore.store.run_store, opened once, on the first case that needs it; closed by close_stores)."""
        from ..objectstore.store import is_object_store, run_store

        if self.storage is not None:
            scenario = replace(scenario, storage=self.storage)
        if is_object_store(scenario.storage) and scenario.storage not in self._opened:
            endpoint = self.endpoint_url if scenario.storage.startswith("s3://") else None
            self._stores.enter_context(run_store(scenario.storage, endpoint))
            self._opened.add(scenario.storage)
        return scenario

    def close_stores(self) -> None:
        self._stores.close()

    def run_dir(self) -> str:
        return self.session.path

    def case_dir(self, name: str) -> str:
        return self.session.case_dir(name)

    def selected(self, combos, backend: str | None = None) -> list:
        """`combos` as --resilience-combos narrows them, and as the backend's factory declares them."""
        declared = self.declared(backend or self.backend or "reference")
        return [c for c in combos if (self.combos is None or c in self.combos) and (declared is None or c in declared)]

    def declared(self, backend: str) -> list | None:
        return self.resolved(backend).combinations()

    def resolved(self, backend: str):
        """`backend` resolved once for the session (runner.adapters.BackendRef), for every case it runs."""
        if backend not in self._resolved:
            from ..runner.adapters import resolve_backend

            self._resolved[backend] = resolve_backend(backend)
        return self._resolved[backend]


OPTIONS = pytest.StashKey[ResilienceOptions]()  # where the config keeps them


def options_of(config) -> ResilienceOptions:
    """The options of the session `config` belongs to (read at pytest_configure)."""
    return config.stash[OPTIONS]


def read_options(config) -> ResilienceOptions:
    """What the command line selected, checked (the profile loaded, a backend by module made once), with the
    session's run folder (under xdist, the controller's)."""
    _load_profile(config)
    backend = config.getoption("resilience_backend")
    _check_backend(config, backend)
    worker = getattr(config, "workerinput", None)
    session = SessionFolder(
        config.getoption("resilience_out"),
        config,
        backend=backend or "per scenario",
        shared=(worker or {}).get(WORKER_INPUT),
        worker=os.environ.get("PYTEST_XDIST_WORKER", "main"),
    )
    return ResilienceOptions(
        config.getoption("resilience_combos"),
        config.getoption("resilience_max_world"),
        backend,
        config.getoption("resilience_out"),
        config,
        config.getoption("resilience_io"),
        config.getoption("resilience_time_budget"),
        config.getoption("resilience_shrink_budget"),
        session,
        repeat=config.getoption("resilience_repeat"),
        storage=config.getoption("resilience_storage"),
        endpoint_url=config.getoption("resilience_endpoint_url"),
    )


def _add_storage_options(group) -> None:
    """--resilience-storage and --resilience-endpoint-url: where the cases keep their checkpoints."""
    group.addoption(
        "--resilience-storage",
        type=parse_storage,
        default=None,
        metavar="WHERE",
        help="where checkpoints go: local, s3 (an S3 server the session starts on 127.0.0.1, a bucket per "
        "case) or s3://bucket/prefix at --resilience-endpoint-url (default: each scenario's, else local)",
    )
    group.addoption(
        "--resilience-endpoint-url",
        default=None,
        metavar="URL",
        help="the S3 endpoint of --resilience-storage s3://bucket/prefix (default: AWS_ENDPOINT_URL)",
    )


def parse_storage(text: str) -> str:
    from ..errors import ConfigError
    from ..objectstore.store import check_storage

    try:
        return check_storage(text)
    except ConfigError as e:
        raise pytest.UsageError(f"--resilience-storage: {e.problem}; {e.fix}") from None


def _load_profile(config) -> None:
    """--resilience-profile, loaded now that conftest files have registered theirs."""
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


def _check_backend(config, backend: str | None) -> None:
    """A backend named by module and factory is made once now, so a wrong name stops pytest before any test."""
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
