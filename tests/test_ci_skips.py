"""Under CI=true a skip for a missing dependency is a failure (tests/conftest.py): CI installs every extra."""

from pathlib import Path

import pytest

pytest_plugins = ["pytester"]

SKIPPED = """
import pytest

@pytest.mark.skipif(True, reason="somelib is not installed (pip install '.[extra]')")
def test_needs_somelib():
    pass

@pytest.mark.skip(reason="needs 64 ranks")
def test_other_skip():
    pass
"""


@pytest.mark.parametrize("ci, failed, skipped", [("true", 1, 1), ("", 0, 2)])
def test_a_skip_for_a_missing_dependency_fails_only_in_ci(pytester, monkeypatch, ci, failed, skipped):
    pytester.makeconftest((Path(__file__).parent / "conftest.py").read_text())
    pytester.makepyfile(test_skips=SKIPPED)
    monkeypatch.setenv("CI", ci)
    result = pytester.runpytest("-p", "no:cacheprovider", "-n", "0")
    result.assert_outcomes(errors=failed, skipped=skipped)
