"""Cases judged side by side (judge_cases with workers): the same rows in the same order as one by one,
every row in the run folder, and a layout learned once between the workers."""

from __future__ import annotations

import glob
import os

import pytest

from resilience.report import RunFolder
from resilience.report.result_row import ResultRow
from resilience.runner import learn
from resilience.runner.case_loop import CaseSpec, judge_cases
from resilience.runner.matrix import cases
from resilience.vocab import Combination

pytestmark = pytest.mark.multiprocess

COMBO = Combination.parse("GLOBAL/torch_dist/sync")


def _specs(folder: RunFolder, columns: list[str]) -> list[CaseSpec]:
    """The matrix's cases of `columns` on COMBO, each in a folder of its own under `folder`."""
    return [
        CaseSpec(
            c.scenario,
            c.combo,
            os.path.join(folder.path, "cases", f"{i:02d}"),
            "reference",
            c.fault,
            None,
            {"column": c.column},
        )
        for i, c in enumerate(cases([COMBO], columns, {}, 0))
    ]


def _judge(tmp_path, workers: int) -> tuple[list[ResultRow], str]:
    folder = RunFolder.create(str(tmp_path / f"w{workers}"), "matrix", {"cases": 3})
    specs = _specs(folder, ["truncate", "bitflip", "save/load"])
    started: list[str] = []
    rows = judge_cases(folder, specs, before=lambda c: started.append(c.case_dir), workers=workers)
    assert sorted(started) == sorted(s.case_dir for s in specs)
    return rows, folder.path


def test_workers_judge_the_same_rows_in_the_same_order(tmp_path, monkeypatch):
    one, _ = _judge(tmp_path, 1)
    monkeypatch.setattr(learn, "_CACHE", {})  # nothing learned before the workers are forked
    two, run_dir = _judge(tmp_path, 2)
    assert [(r.column, r.verdict) for r in two] == [(r.column, r.verdict) for r in one]
    assert [r.verdict for r in two] == ["PASS"] * 3
    folder_rows, _ = RunFolder(run_dir, {}).rows()
    assert sorted(r.column for r in folder_rows) == sorted(r.column for r in two)
    # truncate (the distributed optimizer) and bitflip (Adam) learn different layouts; the cases that
    # share one learn it once between the workers, whoever runs first
    assert not glob.glob(os.path.join(run_dir, "resilience-layouts-*"))  # the workers' shared layouts went
    learned = glob.glob(os.path.join(run_dir, "cases", "*", "layout", "ckpt"))
    assert len(learned) == len({r.column for r in two if r.column != "save/load"}) == 2


def test_workers_take_the_longest_cases_first():
    from resilience.runner.case_loop import _longest_first

    specs = [
        CaseSpec(c.scenario, c.combo, str(i), "reference", c.fault)
        for i, c in enumerate(cases([COMBO], ["bitflip", "lost_unsynced", "kill", "truncate"], {}, 0))
    ]
    order = [specs[i].fault_column for i in _longest_first(specs)]
    assert order[0] == "lost_unsynced" and order[1] == "kill" and order[2:] == ["bitflip", "truncate"]


def test_repeated_cases_run_side_by_side_and_leave_one_row_each(tmp_path, monkeypatch):
    monkeypatch.setattr(learn, "_CACHE", {})
    folder = RunFolder.create(str(tmp_path), "matrix", {"cases": 2})
    specs = _specs(folder, ["truncate", "save/load"])
    started: list[str] = []
    rows = judge_cases(folder, specs, before=lambda c: started.append(c.case_dir), workers=2, repeat=2)
    assert sorted(started) == sorted(os.path.join(s.case_dir, f"repeat-{k}") for s in specs for k in (1, 2))
    assert [r.column for r in rows] == ["truncate", "save/load"] and [r.verdict for r in rows] == ["PASS"] * 2
    for spec, row in zip(specs, rows):
        assert [r.case_dir for r in row.repeats] == [os.path.join(spec.case_dir, f"repeat-{k}") for k in (1, 2)]
        assert row.case_dir == row.repeats[0].case_dir and "(2 runs with the same seed agreed)" in row.detail
    folder_rows, _ = RunFolder(folder.path, {}).rows()
    assert len(folder_rows) == 2  # one row a case in results.jsonl, not one a run
