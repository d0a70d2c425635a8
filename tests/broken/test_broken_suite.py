"""Every deliberately broken implementation is caught: `resilience matrix --backend broken:NAME`, on the
catalogue's column, gives at least one FAIL, and the checker the catalogue names is among those that
gave it. Default: each implementation on its witness combination; -m slow: every catalogued combination,
through the `resilience broken` command that writes the caught-by report."""

from __future__ import annotations

import json
import os
import shlex

import pytest

from resilience.broken import CATALOGUE
from resilience.broken.suite import SuiteResult
from resilience.cli import main
from resilience.runner.corners import CORNERS, is_file_column
from resilience.runner.matrix import FAULTS, STORE_FAULTS, TRANSITIONS
from resilience.vocab.combos import valid_combinations

pytestmark = pytest.mark.multiprocess


def test_catalogue_is_complete():
    assert len(CATALOGUE) >= 12
    valid = {str(c) for c in valid_combinations()}
    checkers = {
        "atomic_commit",
        "durability",
        "integrity",
        "resume_equivalence",
        "topology_independence",
        "generations",
        "precision",
        "recovery",
        "hang",
        "retention",
        "symmetry",
    }
    for impl in CATALOGUE.values():
        assert impl.column in {**FAULTS, **STORE_FAULTS, **TRANSITIONS} or corner_column(impl.column), impl
        assert impl.caught_by in checkers, impl
        assert set(impl.combos) <= valid, impl
        assert impl.witness in (impl.combos or valid), impl


def corner_column(column: str) -> bool:
    return column in CORNERS or is_file_column(column)


def _matrix_rows(tmp_path, name: str) -> list[dict]:
    """The matrix `resilience broken` prints for the implementation (SuiteResult.matrix_command), run."""
    impl = CATALOGUE[name]
    argv = shlex.split(SuiteResult(impl).matrix_command(full=False))[1:]  # after `resilience`
    out = tmp_path / "rows.json"
    code = main([*argv, "--out", str(tmp_path / "runs"), "--json", str(out)])
    assert code == 1, "a matrix with a FAIL exits 1"
    rows = json.loads(out.read_text())
    return [r for r in rows if r["column"] == impl.column] if is_file_column(impl.column) else rows


# a hang is judged at the job's timeout (120 s): that one runs with the slow tests (the hang checker's fast
# test shortens the timeout: tests/runner/test_writer_kill.py)
SLOW = ("writer_death_hangs",)


@pytest.mark.parametrize(
    "name", [pytest.param(n, marks=[pytest.mark.slow] if n in SLOW else []) for n in sorted(CATALOGUE)]
)
def test_broken_implementation_is_caught(tmp_path, name):
    rows = _matrix_rows(tmp_path, name)
    assert [r["verdict"] for r in rows] == ["FAIL"], rows[0]["detail"]
    failed = [c["checker"] for c in rows[0]["checkers"] if c["status"] == "FAIL"]
    assert CATALOGUE[name].caught_by in failed, f"caught by {failed}, catalogue says {CATALOGUE[name].caught_by}"
    assert f"--backend broken:{name}" in rows[0]["replay"]
    if CATALOGUE[name].caught_by == "precision":  # values in another precision are that checker's alone
        assert failed == ["precision"], failed
        assert "CAST-SILENTLY" in rows[0]["detail"] and "no warning" in rows[0]["detail"], rows[0]["detail"]


@pytest.mark.slow
def test_whole_suite_report(tmp_path, capsys):
    code = main(["broken", "--full", "--out", str(tmp_path)])
    out = capsys.readouterr().out
    (run_dir,) = [p for p in tmp_path.iterdir() if p.is_dir()]
    caught = json.loads((run_dir / "caught.json").read_text())
    assert code == 0, out
    assert set(caught) == set(CATALOGUE)
    for name, c in caught.items():
        assert c["caught"] and c["expected"] in c["caught_by"], (name, c)
    report = (run_dir / "broken.md").read_text()
    assert f"{len(CATALOGUE)} of {len(CATALOGUE)} caught" in report
    assert os.path.exists(run_dir / "results.json")


def test_broken_command_on_one(tmp_path, capsys):
    code = main(["broken", "--names", "rng_across_tp", "--out", str(tmp_path)])
    out = capsys.readouterr().out
    assert code == 0, out
    assert "rng_across_tp" in out and "caught by resume_equivalence" in out
    (run_dir,) = [p for p in tmp_path.iterdir() if p.is_dir()]
    report = (run_dir / "broken.md").read_text()
    assert "| `rng_across_tp` |" in report and "resume_equivalence" in report
