"""Hypothesis settings profiles, registered here and only here (the pytest plugin, the project's
tests and `resilience fuzz` all load them by name).

- ci:   fast and deterministic (derandomize: the same examples on every run), 25 examples;
- dev:  50 random examples, for local runs;
- fuzz: long random runs (500 examples) with every health check off (examples start real ranks, so
        they are slow by design) and no explain phase (it would rerun each failure many times)."""

from __future__ import annotations

from typing import Any

from hypothesis import HealthCheck, Phase, settings

PROFILES: dict[str, dict[str, Any]] = {
    "ci": {"max_examples": 25, "deadline": None, "derandomize": True, "print_blob": True},
    "dev": {"max_examples": 50, "deadline": None},
    "fuzz": {
        "max_examples": 500,
        "deadline": None,
        "print_blob": True,
        "suppress_health_check": list(HealthCheck),
        "stateful_step_count": 10,
        "phases": [p for p in Phase if p is not Phase.explain],
    },
}


def register_profiles() -> None:
    """Register every profile of PROFILES with Hypothesis (idempotent)."""
    for name, options in PROFILES.items():
        settings.register_profile(name, **options)


register_profiles()
