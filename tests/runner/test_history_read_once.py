"""A case's history.jsonl is read once: run_case reads it after the last job and hands the events to the
evidence builder and, through CaseResult.history, to the timeline case_row draws."""

import builtins
import os

import pytest

from resilience.history import HISTORY_FILE, case_history
from resilience.runner.case_loop import CaseSpec, case_row
from resilience.runner.scenario import load_text
from resilience.vocab.combos import Combination

pytestmark = pytest.mark.multiprocess

SCENARIO = """
name: read-once
topology: tp1pp1dp2
steps:
  - train: 1
  - save
  - resume: {topology: tp1pp1dp2}
"""


def test_a_case_reads_its_history_once_for_the_evidence_and_the_timeline(tmp_path, monkeypatch):
    opened: list[str] = []
    real_open = builtins.open

    def counting_open(file, *args, **kwargs):
        opened.append(os.fspath(file) if isinstance(file, (str, os.PathLike)) else repr(file))
        return real_open(file, *args, **kwargs)

    monkeypatch.setattr(builtins, "open", counting_open)
    case_dir = str(tmp_path / "case")
    spec = CaseSpec(load_text(SCENARIO, "s.yaml"), Combination.parse("GLOBAL/torch_dist/sync"), case_dir, "reference")
    row = case_row(spec)
    monkeypatch.setattr(builtins, "open", real_open)
    assert row.verdict == "PASS", row
    assert [p for p in opened if os.path.basename(p) == HISTORY_FILE] == [os.path.join(case_dir, HISTORY_FILE)]
    page = open(os.path.join(case_dir, "timeline.html")).read()
    assert 'data-lane="rank 1"' in page and "the timeline could not be drawn" not in page
    assert any(e.f == "load" and e.process == 1 for e in case_history(case_dir))
