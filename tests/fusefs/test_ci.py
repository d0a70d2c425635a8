"""Where FUSE cannot mount the FUSE tests are skipped with why, except under CI=true, where they fail."""

from pathlib import Path

import pytest

pytest_plugins = ["pytester"]

NEEDS_FUSE = """
def test_needs_fuse(fuse):
    pass
"""


@pytest.mark.parametrize("ci, failed, skipped", [("true", 1, 0), ("", 0, 1)])
def test_no_fuse_is_a_skip_except_in_ci(pytester, monkeypatch, ci, failed, skipped):
    conftest = (Path(__file__).parent.parent / "conftest.py").read_text()  # where the fuse fixture lives
    stub = "\n\ndef fuse_available():\n    return False, 'cannot open /dev/fuse: stubbed'\n"
    fixture = "\n\n@pytest.fixture\ndef fuse"
    pytester.makeconftest(conftest.replace("\n" + fixture, stub + fixture, 1))
    pytester.makepyfile(test_fuse=NEEDS_FUSE)
    monkeypatch.setenv("CI", ci)
    result = pytester.runpytest("-p", "no:cacheprovider", "-n", "0", "-rs")
    result.assert_outcomes(errors=failed, skipped=skipped)
    result.stdout.fnmatch_lines(["*stubbed*"])
