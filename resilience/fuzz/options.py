"""A fuzzing run's options (FuzzOptions, checked against the Hypothesis profiles) and the command that runs
the same run again, example for example."""

from __future__ import annotations

import secrets
from dataclasses import asdict, dataclass, field, replace
from typing import Any

from hypothesis import settings
from hypothesis.errors import InvalidArgument

from ..errors import ConfigError
from ..vocab.combos import Combination
from . import profiles  # noqa: F401  (registers the profiles)

MODES = ("scenarios", "machine")


@dataclass
class FuzzOptions:
    examples: int = None  # type: ignore[assignment]  # per mode; None: the profile's max_examples
    seed: int = None  # type: ignore[assignment]  # None: 0 under a derandomized profile (ci), else a fresh random one
    combos: list[Combination] | None = None
    max_world: int = 2
    time_budget: float | None = None  # seconds for the whole run, shared by the modes
    shrink_budget: float = 120.0  # seconds a found failure may spend shrinking
    all_bugs: bool = False  # shrink each failure class separately (slower), not one failure per mode
    backend: str = "reference"
    backend_options: bool = False  # scenario mode draws the backend's declared options too
    precision_changes: bool = False  # a resume after the last save may change the precision
    io: str | None = None  # how faults reach the backend (runner.io_route); None: auto
    storage: str | None = None  # where checkpoints go (objectstore.store): local, s3, s3://...; None: local
    endpoint_url: str | None = None  # the S3 endpoint of an s3:// storage
    out: str = "runs"
    modes: tuple[str, ...] = MODES
    faults: list[str] | None = None  # fault kinds to draw (default: the deterministic ones)
    max_steps: int = 6  # actions per scenario, rules per machine run
    profile: str = "dev"  # ci: 25 examples, seed 0; dev: 50; fuzz: 500 (resilience.fuzz.profiles)
    workers: int = 1  # scenario mode: examples run ahead this many at a time (speculation.py)
    resolved: Any = field(default=None, repr=False, compare=False)  # `backend` as the command resolved it

    def __post_init__(self):
        try:
            base = settings.get_profile(self.profile)
        except InvalidArgument:
            raise ConfigError("--profile", f"no Hypothesis profile {self.profile!r}", "use ci, dev or fuzz") from None
        if self.examples is None:
            self.examples = base.max_examples
        if self.seed is None:
            self.seed = 0 if base.derandomize else secrets.randbelow(2**32)
        for m in self.modes:
            if m not in MODES:
                raise ConfigError("--mode", f"unknown mode {m!r}", f"use {', '.join(MODES)} or both")


def options_dict(opts: FuzzOptions) -> dict:
    """The options as fuzz.json and the outcome keep them (combinations as text)."""
    d = asdict(replace(opts, resolved=None))
    del d["resolved"]  # the run's own value, named by `backend`
    d["combos"] = [str(c) for c in opts.combos] if opts.combos else None
    d["modes"] = list(opts.modes)
    return d


def replay_fuzz(opts: FuzzOptions) -> str:
    """The command that runs this fuzzing run again, example for example."""
    import shlex

    cmd = [
        "resilience",
        "fuzz",
        "--seed",
        str(opts.seed),
        "--examples",
        str(opts.examples),
        *(["--profile", opts.profile] if opts.profile != FuzzOptions.profile else []),
        "--max-world",
        str(opts.max_world),
        "--max-steps",
        str(opts.max_steps),
    ]
    if opts.combos:
        cmd += ["--combos", *map(str, opts.combos)]
    if opts.storage is not None:
        cmd += ["--storage", opts.storage] + (["--endpoint-url", opts.endpoint_url] if opts.endpoint_url else [])
    if opts.faults is not None:
        cmd += ["--faults", *opts.faults]
    if tuple(opts.modes) != MODES:
        cmd += ["--mode", *opts.modes]
    if opts.backend != "reference":
        cmd += ["--backend", opts.backend]
    if opts.backend_options:
        cmd += ["--backend-options"]
    if opts.precision_changes:
        cmd += ["--precision-changes"]
    if opts.time_budget is not None:
        cmd += ["--time-budget", f"{opts.time_budget:g}"]
    if opts.shrink_budget != FuzzOptions.shrink_budget:
        cmd += ["--shrink-budget", f"{opts.shrink_budget:g}"]
    if opts.all_bugs:
        cmd += ["--all-bugs"]
    return " ".join(shlex.quote(c) for c in cmd)


__all__ = ["FuzzOptions", "MODES", "options_dict", "replay_fuzz"]
