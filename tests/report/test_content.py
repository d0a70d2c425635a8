"""What the reports say: a run folder built from hand-made rows (one of each verdict, evidence, a framework
error, a fault that never fired, hostile text) and the counts, cells, replay commands and escaping of
report.md, report.html and junit.xml. No ranks: only the rendering is under test."""
from __future__ import annotations

import json
import xml.etree.ElementTree as ET

import pytest

from resilience.cli import main
from resilience.report import RunFolder
from resilience.report.folder import INTERRUPTED

COMBO = "GLOBAL/torch_dist/sync"
OTHER = "LEGACY/torch/sync"
HOSTILE = "<script>alert('x')</script> & \"quoted\""


def _row(column: str, verdict: str, detail: str = "", combo: str = COMBO, **extra) -> dict:
    return dict({"scenario": column, "combo": combo, "column": column, "fault": column, "transition": None,
                 "verdict": verdict, "detail": detail, "seconds": 1.5, "checkers": [], "faults": [],
                 "replay": f"resilience run cases/{column}/scenario.yaml --combos {combo}"}, **extra)


EVIDENCE = [{"op": "save", "iteration": i, "rank": 0} for i in range(1, 5)]  # the report shows the first 3
ROWS = [
    _row("save-load", "PASS", "all checkers passed"),
    _row("bitflip", "FAIL", "integrity: a load returned wrong values",
         checkers=[{"checker": "integrity", "status": "FAIL", "detail": "load of iter 2 returned wrong values",
                    "evidence": EVIDENCE},
                   {"checker": "atomic", "status": "PASS", "detail": "fine", "evidence": []}],
         faults=[{"fault": "bit_flip", "status": "fired"}]),
    _row("metadata", "UNKNOWN", "framework error: KeyError: 'manifest.json' (traceback: x/framework-error.txt)",
         checkers=[{"checker": "framework", "status": "UNKNOWN", "detail": "framework error: KeyError",
                    "evidence": []}]),
    _row("kill", "UNPROBED", "configured fault never fired: rank_kill rank=1",
         faults=[{"fault": "rank_kill rank=1", "status": "never_fired"}]),
    _row("tp", "REFUSED-AS-EXPECTED", "TopologyChangeRefused: LEGACY cannot load on tp1", transition="tp2->tp1"),
    _row("io_error", "FAIL", "durability: an acknowledged save was lost", combo=OTHER,
         faults=[{"fault": "io_error", "status": "never_fired"}]),  # a FAIL whose fault never fired
    _row("pickle", "N/A", "nothing to damage", combo=OTHER),
    _row(HOSTILE, "FAIL", HOSTILE, combo=OTHER,
         checkers=[{"checker": "resume", "status": "FAIL", "detail": HOSTILE, "evidence": [{"path": HOSTILE}]}]),
]
META = {"title": "resilience matrix <&>", "seed": [7], "backend": "reference", "cases": 10,
        "command": "resilience matrix --seed 7"}


@pytest.fixture
def run_dir(tmp_path):
    folder = RunFolder.create(str(tmp_path), "content", dict(META))
    for row in ROWS:
        folder.append(row)
    folder.finish(columns=None)
    return tmp_path / next(p.name for p in tmp_path.iterdir())


def _read(run_dir, name: str) -> str:
    return (run_dir / name).read_text(encoding="utf-8")


def test_markdown_counts_cells_and_cases_that_did_not_pass(run_dir):
    md = _read(run_dir, "report.md")
    lines = md.splitlines()
    assert lines[0] == "# resilience matrix <&>"
    assert "seed `[7]` · backend `reference` · 8 cases · command `resilience matrix --seed 7`" in md
    assert "Verdicts: FAIL 3, N/A 1, PASS 1, REFUSED-AS-EXPECTED 1, UNKNOWN 1, UNPROBED 1" in lines
    assert f"| {COMBO} | PASS | FAIL | UNKNOWN | UNPROBED | REFUSED | - | - | - |" in lines
    assert f"| {OTHER} | - | - | - | - | - | FAIL+UNPROBED | - | FAIL |" in lines
    failing = md.split("## Cases that did not pass")[1].split("## Refused as expected")[0]
    for column, verdict, combo in [("bitflip", "FAIL", COMBO), ("metadata", "UNKNOWN", COMBO),
                                   ("kill", "UNPROBED", COMBO), ("io_error", "FAIL", OTHER)]:
        assert f"### {combo} · {column} · {verdict}" in failing
        assert f"replay: `resilience run cases/{column}/scenario.yaml --combos {combo}`" in failing
    for column in ("save-load", "tp", "pickle"):  # passed, refused or nothing to judge: no section of their own
        assert f"cases/{column}/" not in failing
    assert "- **integrity** FAIL: load of iter 2 returned wrong values" in failing
    assert "**atomic**" not in failing  # a checker that passed is not listed
    shown = [json.loads(line.strip()[3:-1]) for line in failing.splitlines() if line.startswith('  - `{"op"')]
    assert shown == EVIDENCE[:3]
    refused = md.split("## Refused as expected")[1]
    assert f"- {COMBO} · tp: TopologyChangeRefused: LEGACY cannot load on tp1" in refused


def test_html_escapes_every_text_it_shows(run_dir):
    page = _read(run_dir, "report.html")
    assert "<script>" not in page and "alert('x')</script>" not in page
    assert "&lt;script&gt;alert(&#x27;x&#x27;)&lt;/script&gt; &amp; &quot;quoted&quot;" in page
    assert "<title>resilience matrix &lt;&amp;&gt;</title>" in page


def test_html_cells_details_and_replays(run_dir):
    page = _read(run_dir, "report.html")
    rows = page.split("<tr>")[2:]  # after the header
    assert [r.split("</th>")[0] for r in rows] == [f"<th>{COMBO}", f"<th>{OTHER}"]
    cells = [[td.split(">", 1)[1].split("</td>")[0] for td in r.split("<td ")[1:]] for r in rows]
    assert cells == [["PASS", "FAIL", "UNKNOWN", "UNPROBED", "REFUSED", "-", "-", "-"],
                     ["-", "-", "-", "-", "-", "FAIL+UNPROBED", "-", "FAIL"]]
    assert 'style="background:#c62828" title="integrity: a load returned wrong values">FAIL</td>' in page
    assert "<br><small>tp2→tp1</small>" in page  # a transition column names its transition
    details = page.split("</table>")[1]
    headings = [h.split("</h3>")[0] for h in details.split("<h3>")[1:]]
    assert {f"{COMBO} · bitflip · FAIL", f"{COMBO} · metadata · UNKNOWN", f"{COMBO} · kill · UNPROBED",
            f"{OTHER} · io_error · FAIL"} <= set(headings)
    assert not any(h.endswith(("PASS", "REFUSED-AS-EXPECTED")) for h in headings)
    for column, combo in [("bitflip", COMBO), ("metadata", COMBO), ("kill", COMBO), ("io_error", OTHER)]:
        assert f"<pre>resilience run cases/{column}/scenario.yaml --combos {combo}</pre>" in details
    assert "cases/save-load/" not in details and "cases/tp/" not in details


def test_junit_counts_failures_and_errors_and_keeps_each_replay(run_dir):
    suite = ET.fromstring(_read(run_dir, "junit.xml"))
    assert suite.get("name") == "resilience matrix <&>"
    assert (suite.get("tests"), suite.get("failures"), suite.get("errors")) == ("8", "3", "2")
    cases = {(c.get("classname"), c.get("name")): c for c in suite.iter("testcase")}
    assert len(cases) == 8 and cases[(COMBO, "bitflip")].get("time") == "1.5"
    outcome = {k: [child.tag for child in c] for k, c in cases.items()}
    assert outcome == {(COMBO, "save-load"): [], (COMBO, "bitflip"): ["failure"], (COMBO, "metadata"): ["error"],
                       (COMBO, "kill"): ["error"], (COMBO, "tp"): [], (OTHER, "io_error"): ["failure"],
                       (OTHER, "pickle"): ["skipped"], (OTHER, HOSTILE): ["failure"]}
    failure = cases[(COMBO, "bitflip")].find("failure")
    assert failure.get("message") == "integrity: a load returned wrong values"
    assert failure.text.endswith("replay: resilience run cases/bitflip/scenario.yaml --combos " + COMBO)
    assert cases[(COMBO, "metadata")].find("error").get("message").startswith("UNKNOWN: framework error: KeyError")
    assert cases[(COMBO, "kill")].find("error").get("message").startswith("UNPROBED: configured fault never fired")
    assert cases[(OTHER, HOSTILE)].find("failure").get("message") == HOSTILE  # escaped, and read back whole
    props = {p.get("name"): p.get("value") for p in suite.iter("property")}
    assert props == {"status": "complete"}


def test_an_interrupted_run_says_so_in_every_report(tmp_path):
    folder = RunFolder.create(str(tmp_path), "stopped", dict(META))
    for row in ROWS[:2]:
        folder.append(row)
    folder.finish(status=INTERRUPTED, why="SIGTERM")
    note = "INTERRUPTED (SIGTERM): 2 of 10 cases finished"
    md = (tmp_path / folder.path / "report.md").read_text()
    assert md.splitlines()[0] == "# resilience matrix <&> (interrupted)"
    assert f"**{note}**: the rows below are the cases that finished." in md
    assert "Verdicts: FAIL 1, PASS 1" in md
    assert f"<p><b>{note}</b>" in (tmp_path / folder.path / "report.html").read_text()
    suite = ET.fromstring((tmp_path / folder.path / "junit.xml").read_text())
    assert {p.get("name"): p.get("value") for p in suite.iter("property")} == {"status": "interrupted",
                                                                               "note": note}
    meta = json.loads((tmp_path / folder.path / "run.json").read_text())
    assert (meta["status"], meta["stopped_by"], meta["finished_cases"]) == ("interrupted", "SIGTERM", 2)
    assert "note" not in meta


def test_report_rebuilds_the_same_reports_and_exits_1_on_a_failing_row(run_dir, capsys):
    before = {name: _read(run_dir, name) for name in ("report.md", "junit.xml", "results.json")}
    assert main(["report", str(run_dir)]) == 1
    out = capsys.readouterr().out
    # PASS and REFUSED pass, N/A is on its own, and every FAILING verdict (UNKNOWN, UNPROBED) is not passed
    assert "2 passed, 1 N/A, 5 not passed (3 FAIL, 1 UNKNOWN, 1 UNPROBED)" in out
    assert f"FAIL: bitflip {COMBO}: integrity: a load returned wrong values" in out
    assert f"  replay: resilience run cases/bitflip/scenario.yaml --combos {COMBO}" in out
    assert {name: _read(run_dir, name) for name in before} == before
