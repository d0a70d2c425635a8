"""Which backend specs a sweep of a backend's declared options runs (`resilience matrix --backend-options`).

The reading: the defaults first, then each non-default value of each option, one at a time, against the
defaults (never two changed at once), so a row that differs from the defaults' row shows what that one
option changes. Values the adapter refuses here (e.g. CUDA-only staging on CPU) are left out, and
listed with the reason. An option only async saves read runs on the async combinations only."""

from __future__ import annotations

from dataclasses import dataclass

from ..backends.options import Option, OptionSet, join_spec, show, sweep
from ..errors import ConfigError
from .adapters import ALIASES, declared_options, parse_backend, split


@dataclass(frozen=True)
class SweepColumn:
    """One option set of a sweep: its backend spec (what every case of it runs and its replay names)
    and the options changed from the defaults."""

    spec: str
    options: OptionSet

    @property
    def label(self) -> str:
        return self.options.label

    def applies_to(self, combo) -> bool:
        return self.options.io is None or (self.options.io == "async") == combo.is_async


def plan_sweep(backend: str, which: list[str] | None) -> list[SweepColumn]:
    """The option sets of `backend` to run: `which` is None (only the spec as given), ['all'] (every
    declared option) or option names. The spec's own options stay fixed under every set."""
    spec = parse_backend(backend)
    if not which:
        return [SweepColumn(spec, OptionSet({}))]
    declared = declared_options(spec)
    if not declared:
        raise ConfigError(
            "--backend-options",
            f"{split(spec)[0]} declares no options",
            "leave --backend-options out, or give a backend whose factory declares `options`",
        )
    base, given = split(spec)
    fixed = set(given)
    only = None if which == ["all"] else list(which)
    if only and "all" in only:
        raise ConfigError("--backend-options", "'all' cannot be mixed with option names", "give 'all' alone")
    for name in only or ():
        if name in fixed:
            raise ConfigError(
                "--backend-options",
                f"{name} is fixed by the backend spec {spec!r}",
                f"drop {name}= from --backend, or leave {name} out of --backend-options",
            )
    sets = [s for s in sweep(declared, only) if not fixed & set(s.options)]
    return [
        SweepColumn(join_spec(base, {**given, **{k: show(v) for k, v in s.options.items()}}, alias=base in ALIASES), s)
        for s in sets
    ]


def refused_values(declared: tuple[Option, ...]) -> list[str]:
    """'name=value: reason' for each declared value a sweep leaves out because it cannot run here."""
    return [f"{o.name}={show(v)}: {why}" for o in declared for v, why in o.refused.items()]
