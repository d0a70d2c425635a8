import os

import psutil
import pytest
from hypothesis import settings

import resilience.fuzz.profiles  # noqa: F401  (registers ci / dev / fuzz, as the pytest plugin does)

settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))


@pytest.fixture(autouse=True)
def no_leftover_processes():
    """Every test ends with no rank process of ours still alive."""
    before = {p.pid for p in psutil.Process().children(recursive=True)}
    yield
    left = [p for p in psutil.Process().children(recursive=True) if p.pid not in before]
    alive = [p for p in left if p.is_running() and p.status() != psutil.STATUS_ZOMBIE]
    assert not alive, f"processes left behind: {[(p.pid, p.name()) for p in alive]}"
