"""Hypothesis settings profiles, registered here and only here (the pytest plugin, the project's
tests and `resilience fuzz` all load them by name).

- ci:   fast and deterministic (derandomize: the same examples on every run), 25 examples;
- dev:  50 random examples, for local runs;
- fuzz: long random runs (500 examples) with every health check off: examples start real ranks,
        so they are slow by design."""
from __future__ import annotations

from hypothesis import HealthCheck, settings

PROFILES = {
    "ci": {"max_examples": 25, "deadline": None, "derandomize": True, "print_blob": True},
    "dev": {"max_examples": 50, "deadline": None},
    "fuzz": {"max_examples": 500, "deadline": None, "print_blob": True,
             "suppress_health_check": list(HealthCheck), "stateful_step_count": 10},
}


def register_profiles() -> None:
    """Register every profile of PROFILES with Hypothesis (idempotent)."""
    for name, options in PROFILES.items():
        settings.register_profile(name, **options)


register_profiles()
