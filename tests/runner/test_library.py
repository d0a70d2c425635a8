"""The shipped scenario library on the reference: a fast subset by default, every scenario on every one of
its combinations under -m slow."""

from pathlib import Path

import pytest

from resilience.runner.run import run_case
from resilience.runner.scenario import load_file

LIBRARY = Path(__file__).parents[2] / "scenarios"
GOOD = {"PASS", "REFUSED-AS-EXPECTED"}


def _cases():
    fast = 0
    for path in sorted(LIBRARY.glob("*.yaml")):
        scenario = load_file(path)
        combos = scenario.combinations
        # a fast scenario runs on two of its combinations by default, taken in turn, so that the fast ones
        # together go through every combination
        kept = {combos[(2 * fast + k) % len(combos)] for k in (0, 1)} if "fast" in scenario.tags else set()
        fast += "fast" in scenario.tags
        for combo in combos:
            marks = [pytest.mark.multiprocess] + ([] if combo in kept else [pytest.mark.slow])
            yield pytest.param(path, combo, marks=marks, id=f"{path.stem}-{combo}")


@pytest.mark.parametrize("path, combo", list(_cases()))
def test_reference_survives_the_library(tmp_path, path, combo):
    result = run_case(load_file(path), combo, str(tmp_path / "case"))
    assert result.verdict in GOOD, f"{result.verdict}: {result.detail}\nreplay: {result.replay}"
