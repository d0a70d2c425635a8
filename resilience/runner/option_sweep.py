"""Which backend specs a sweep of a backend's declared options runs (`resilience matrix --backend-options`).

The reading: the defaults first, then each non-default value of each option, one at a time, against the
defaults (never two changed at once), so a row that differs from the defaults' row shows what that one
option changes. Values the adapter refuses here (e.g. CUDA-only staging on CPU) are left out, and
listed with the reason. An option only async saves read runs on the async combinations only."""

from __future__ import annotations

from dataclasses import dataclass

from ..backends.options import Option, OptionSet, show, sweep
from ..errors import ConfigError
from .adapters import BackendName, BackendRef, resolve_backend


@dataclass(frozen=True)
class SweepColumn:
    """One option set of a sweep: its backend (what every case of it runs; its spec is what the replay
    names), and the options changed from the defaults."""

    backend: BackendRef
    options: OptionSet

    @property
    def spec(self) -> str:
        return self.backend.spec

    @property
    def label(self) -> str:
        return self.options.label

    def applies_to(self, combo) -> bool:
        return self.options.io is None or (self.options.io == "async") == combo.is_async


def plan_sweep(backend: BackendName, which: list[str] | None) -> list[SweepColumn]:
    """The option sets of `backend` to run, each resolved once: `which` is None (only the spec as given),
    ['all'] (every declared option) or option names. The spec's own options stay fixed under every set."""
    ref = resolve_backend(backend)
    spec = ref.spec
    if not which:
        return [SweepColumn(ref, OptionSet({}))]
    declared = ref.declared_options
    if not declared:
        raise ConfigError(
            "--backend-options",
            f"{ref.label} declares no options",
            "leave --backend-options out, or give a backend whose factory declares `options`",
        )
    fixed = set(ref.given)
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
    return [SweepColumn(ref.with_options(s.options) if s.options else ref, s) for s in sets]


def refused_values(declared: tuple[Option, ...]) -> list[str]:
    """'name=value: reason' for each declared value a sweep leaves out because it cannot run here."""
    return [f"{o.name}={show(v)}: {why}" for o in declared for v, why in o.refused.items()]
