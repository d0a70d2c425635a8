"""A framework error in one case (run_case raising, not the implementation) is that case's UNKNOWN, with
its traceback in the case folder; the run goes on and writes its folder."""

from __future__ import annotations

import json
import os

import resilience.runner.run as run_module
from resilience.cli import main


def test_a_case_the_framework_breaks_on_is_unknown_and_the_run_goes_on(tmp_path, monkeypatch, capsys):
    real = run_module.run_case
    seen = []

    def breaks_on_the_first(scenario, combo, case_dir, **kw):
        seen.append(case_dir)
        if len(seen) == 1:
            os.makedirs(case_dir, exist_ok=True)
            raise KeyError("manifest.json")  # e.g. a corruption that assumed our layout on a foreign backend
        return real(scenario, combo, case_dir, **kw)

    monkeypatch.setattr(run_module, "run_case", breaks_on_the_first)
    code = main(
        [
            "matrix",
            "--combos",
            "GLOBAL/torch_dist/sync",
            "--faults",
            "metadata:manifest.json",
            "save/load",
            "--transitions",
            "none",
            "--workers",
            "1",  # the patch counts calls in this process
            "--out",
            str(tmp_path),
        ]
    )
    assert code == 1 and len(seen) == 2
    captured = capsys.readouterr()
    assert "UNKNOWN (framework error): matrix-metadata:manifest.json GLOBAL/torch_dist/sync" in captured.out
    assert "1 of the UNKNOWN are framework errors" in captured.out
    err = captured.err  # not a terminal: a plain progress line per tenth of the cases
    assert "progress: 1/2 cases · 1 failed (UNKNOWN 1) · " in err
    assert "progress: 2/2 cases · 1 failed (PASS 1, UNKNOWN 1) · " in err
    (run_dir,) = [p for p in tmp_path.iterdir() if p.is_dir()]
    rows = json.loads((run_dir / "results.json").read_text())
    assert [r["verdict"] for r in rows] == ["UNKNOWN", "PASS"]
    assert rows[0]["detail"].startswith("framework error: KeyError: 'manifest.json'")
    trace = open(os.path.join(rows[0]["case_dir"], "framework-error.txt")).read()
    assert "Traceback" in trace and "breaks_on_the_first" in trace
    assert rows[0]["replay"].startswith("resilience run ") and os.path.exists(rows[0]["replay"].split()[2])
    assert json.loads((run_dir / "run.json").read_text())["status"] == "complete"
    assert "UNKNOWN" in (run_dir / "junit.xml").read_text()
    # the case that ran has its timeline (both ranks' saves), linked from the report; the one the framework
    # broke on before anything ran has none, and a link to its traceback
    page = open(os.path.join(rows[1]["case_dir"], "timeline.html")).read()
    assert 'data-lane="rank 0"' in page and 'data-lane="rank 1"' in page and ">save it 2<" in page
    report = (run_dir / "report.html").read_text()
    broken, ran = (os.path.relpath(r["case_dir"], run_dir) for r in rows)
    assert f'href="{ran}/timeline.html">timeline</a>' in report
    assert f'href="{broken}/framework-error.txt">traceback</a>' in report and f"{broken}/timeline.html" not in report
    # written out on the page: where the framework broke and the end of its traceback, apart from the failures
    from .dom import parse

    page = parse(report)
    assert page.by_id("headline").text == "1 passed, 1 not passed (1 UNKNOWN); 1 of the 1 UNKNOWN is a framework error"
    (article,) = page.by_id("framework").find_all("article")
    evidence = dict(zip((dt.text for dt in article.find_all("dt")), (dd.text for dd in article.find_all("dd"))))
    assert evidence["where"].endswith("in breaks_on_the_first")
    assert evidence["traceback"].rstrip().endswith("KeyError: 'manifest.json'")
    assert not article.find_all(cls="detail")  # the detail is its one finding's, shown once
