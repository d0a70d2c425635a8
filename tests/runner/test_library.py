"""The shipped scenario library on the reference: a fast subset by default, every scenario under -m slow."""

from pathlib import Path

import pytest

from resilience.runner.run import run_case
from resilience.runner.scenario import load_file

LIBRARY = Path(__file__).parents[2] / "scenarios"
GOOD = {"PASS", "REFUSED-AS-EXPECTED"}


def _cases():
    for path in sorted(LIBRARY.glob("*.yaml")):
        scenario = load_file(path)
        marks = [pytest.mark.multiprocess] + ([] if "fast" in scenario.tags else [pytest.mark.slow])
        for combo in scenario.combinations:
            yield pytest.param(path, combo, marks=marks, id=f"{path.stem}-{combo}")


@pytest.mark.parametrize("path, combo", list(_cases()))
def test_reference_survives_the_library(tmp_path, path, combo):
    result = run_case(load_file(path), combo, str(tmp_path / "case"))
    assert result.verdict in GOOD, f"{result.verdict}: {result.detail}\nreplay: {result.replay}"
