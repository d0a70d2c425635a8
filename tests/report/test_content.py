"""What the reports say: a run folder built from hand-made rows (one of each verdict, evidence, a framework
error, a fault that never fired, hostile text) and the counts, cells, sections, evidence, links, replay
commands and escaping of report.md, report.html and junit.xml. No ranks: only the rendering is under test."""

from __future__ import annotations

import json
import os
import shutil
import xml.etree.ElementTree as ET

import pytest

from resilience.cli import main
from resilience.report import RunFolder
from resilience.report.folder import INTERRUPTED
from resilience.report.html import render_html
from resilience.report.markdown import render_markdown
from resilience.report.result_row import ResultRow

from .dom import parse

COMBO = "GLOBAL/torch_dist/sync"
OTHER = "LEGACY/torch/sync"
HOSTILE = '<script>document.body.dataset.pwned = 1</script> & "quoted" <img src=x onerror=alert(1)>'


def _typed(rows: list[dict]) -> list[ResultRow]:
    """Rows as results.jsonl holds them, read back."""
    return [ResultRow.from_dict(r) for r in rows]


def _row(column: str, verdict: str, detail: str = "", combo: str = COMBO, **extra) -> dict:
    return dict(
        {
            "scenario": column,
            "combo": combo,
            "column": column,
            "fault": column,
            "transition": None,
            "verdict": verdict,
            "detail": detail,
            "seconds": 1.5,
            "checkers": [],
            "faults": [],
            "replay": f"resilience run cases/{column}/scenario.yaml --combos {combo}",
        },
        **extra,
    )


EVIDENCE = [{"op": "save", "iteration": i, "rank": 0} for i in range(1, 8)]  # the reports write out the first 5
TRACEBACK = "Traceback (most recent call last):\n  File \"x.py\", line 1\nKeyError: 'manifest.json'"
ROWS = [
    _row("save-load", "PASS", "all checkers passed", case_dir="/old/place/runs/x/cases/000-save-load"),
    _row(
        "bitflip",
        "FAIL",
        "integrity: a load returned wrong values",
        checkers=[
            {
                "checker": "integrity",
                "status": "FAIL",
                "detail": "load of iter 2 returned wrong values",
                "evidence": EVIDENCE,
            },
            {"checker": "atomic", "status": "PASS", "detail": "fine", "evidence": []},
        ],
        faults=[{"fault": "bit_flip", "status": "fired"}],
        case_dir="/old/place/runs/x/cases/001-bitflip",
    ),
    _row(
        "metadata",
        "UNKNOWN",
        "framework error: KeyError: 'manifest.json' (traceback: x/framework-error.txt)",
        checkers=[
            {
                "checker": "framework",
                "status": "UNKNOWN",
                "detail": "framework error: KeyError",
                "evidence": [{"traceback": TRACEBACK}],
            }
        ],
        case_dir="/old/place/runs/x/cases/002-metadata",
    ),
    _row(
        "kill",
        "UNPROBED",
        "configured fault never fired: rank_kill rank=1",
        faults=[{"fault": "rank_kill rank=1", "status": "never_fired"}],
    ),
    _row("tp", "REFUSED-AS-EXPECTED", "TopologyChangeRefused: LEGACY cannot load on tp1", transition="tp2->tp1"),
    _row(
        "io_error",
        "FAIL",
        "durability: an acknowledged save was lost",
        combo=OTHER,
        faults=[{"fault": "io_error", "status": "never_fired"}],
    ),  # a FAIL whose fault never fired
    _row("pickle", "N/A", "nothing to damage", combo=OTHER),
    _row(
        HOSTILE,
        "FAIL",
        HOSTILE,
        combo=OTHER,
        checkers=[{"checker": "resume", "status": "FAIL", "detail": HOSTILE, "evidence": [{"path": HOSTILE}]}],
    ),
    _row(
        "hang",
        "UNKNOWN",
        "rank 1 timed out",
        combo=OTHER,
        checkers=[{"checker": "saves", "status": "UNKNOWN", "detail": "rank 1 timed out", "evidence": []}],
    ),
]
META = {
    "title": "resilience matrix <&>",
    "seed": [7],
    "backend": "reference",
    "cases": 10,
    "command": "resilience matrix --seed 7",
}
# case folders of three rows, whose rows name an old place: the run folder was moved since the run
CASE_FILES = {
    "000-save-load": ["scenario.yaml", "history.jsonl", "logs/job0/rank0.log"],
    "001-bitflip": ["scenario.yaml", "history.jsonl", "faults.jsonl", "logs/job0/rank0.log"],
    "002-metadata": ["scenario.yaml", "framework-error.txt"],
}


def make_run(base, rows=ROWS, meta=META) -> str:
    """A finished run folder under `base` holding `rows` and the case folders of CASE_FILES."""
    folder = RunFolder.create(str(base), "content", dict(meta))
    for case, files in CASE_FILES.items():
        for name in files:
            path = os.path.join(folder.path, "cases", case, name)
            os.makedirs(os.path.dirname(path), exist_ok=True)
            with open(path, "w") as f:
                f.write("x\n")
    for row in rows:
        folder.append(ResultRow.from_dict(row))
    folder.finish(columns=None)
    return folder.path


@pytest.fixture
def run_dir(tmp_path):
    return make_run(tmp_path)


def _read(run_dir, name: str) -> str:
    with open(os.path.join(str(run_dir), name), encoding="utf-8") as f:
        return f.read()


def test_markdown_counts_cells_and_cases_that_did_not_pass(run_dir):
    md = _read(run_dir, "report.md")
    lines = md.splitlines()
    assert lines[0] == "# resilience matrix <&>"
    assert lines[2].startswith("seed `[7]` · backend `reference` · cases `9 of 10` · time in cases `13.5 s`")
    assert (
        "**2 passed, 1 N/A, 6 not passed (3 FAIL, 2 UNKNOWN, 1 UNPROBED); 1 of the 2 UNKNOWN is a framework error**"
        in lines
    )
    assert "Verdicts: 9 cases: PASS 1, REFUSED 1, FAIL 3, UNKNOWN 1, framework error 1, UNPROBED 1, N/A 1" in lines
    assert f"| {COMBO} | PASS | FAIL | ERROR | UNPROBED | REFUSED | - | - | - | - |" in lines
    assert f"| {OTHER} | - | - | - | - | - | FAIL+UNPROBED | - | FAIL | UNKNOWN |" in lines
    sections = {s.split("\n")[0]: s for s in md.split("\n## ")[1:]}
    assert list(sections) == [
        "Failures of the implementation (4)",
        "Not probed (1)",
        "Framework errors (1)",
        "Refused as expected (1)",
    ]
    failed = sections["Failures of the implementation (4)"]
    for column, label, combo in [
        ("bitflip", "FAIL", COMBO),
        ("io_error", "FAIL+UNPROBED", OTHER),
        ("hang", "UNKNOWN", OTHER),
    ]:
        assert f"### {combo} · {column} · {label}" in failed
        assert f"```\nresilience run cases/{column}/scenario.yaml --combos {combo}\n```" in failed
    assert f"### {COMBO} · kill · UNPROBED" in sections["Not probed (1)"]
    framework = sections["Framework errors (1)"]
    assert f"### {COMBO} · metadata · ERROR" in framework and "metadata" not in failed
    assert "      KeyError: 'manifest.json'" in framework  # a traceback as a fenced block, line by line
    for column in ("save-load", "tp", "pickle"):  # passed, refused or nothing to judge: no section of their own
        assert f"cases/{column}/" not in md
    assert "- **integrity** FAIL: load of iter 2 returned wrong values" in failed
    assert "**atomic**" not in failed  # a checker that passed is not listed
    assert [line for line in failed.splitlines() if line.startswith("    - iteration: ")] == [
        f"    - iteration: `{i}`" for i in range(1, 6)
    ]
    assert "  - and 2 more in results.json" in failed
    # links relative to the run folder, though the rows name the folder's old place
    assert (
        "files: [case folder](cases/001-bitflip/) · [scenario](cases/001-bitflip/scenario.yaml) · "
        "[history](cases/001-bitflip/history.jsonl) · [logs](cases/001-bitflip/logs/) · "
        "[faults fired](cases/001-bitflip/faults.jsonl) · [timeline](cases/001-bitflip/timeline.html)"
    ) in failed
    assert "[traceback](cases/002-metadata/framework-error.txt)" in framework
    assert f"- {COMBO} · tp: TopologyChangeRefused: LEGACY cannot load on tp1" in sections["Refused as expected (1)"]


def check_links(page, run_dir: str) -> None:
    """Every file link resolves inside the run folder, and every link inside the page to an element of it."""
    ids = {e.attrs["id"] for e in page.iter() if "id" in e.attrs}
    for a in page.find_all("a"):
        href = a.attrs["href"]
        if href.startswith("#"):
            assert href[1:] in ids, f"{href} leads nowhere in the page"
        else:
            assert not href.startswith(("/", "file:", "..")) and os.path.exists(os.path.join(run_dir, href)), href


def check_report_page(page, run_dir: str) -> None:
    """What report.html must show without hovering or opening another file, read from its DOM (as written,
    or as a browser rendered it): counts, matrix cells and their links, each case that did not pass with
    its evidence, files and replay, and file links that resolve inside the run folder."""
    assert page.find("title").text == "resilience matrix <&>"
    assert (
        page.by_id("headline").text
        == "2 passed, 1 N/A, 6 not passed (3 FAIL, 2 UNKNOWN, 1 UNPROBED); 1 of the 2 UNKNOWN is a framework error"
    )
    counts = {
        li.attrs.get("data-verdict", "cases"): li.find(cls="n").text for li in page.by_id("counts").find_all("li")
    }
    assert counts == {
        "cases": "9",
        "PASS": "1",
        "REFUSED": "1",
        "FAIL": "3",
        "UNKNOWN": "1",
        "framework error": "1",
        "UNPROBED": "1",
        "N/A": "1",
    }
    matrix = page.find("table", cls="matrix")
    heads = [th.text for th in matrix.find("thead").find_all("th")]
    assert heads[:6] == [
        "combination",
        "save-load",
        "bitflip",
        "metadata",
        "kill",
        "tptp2\u00a0→ tp1",
    ]  # the arrow stays with the topology before it
    body = matrix.find("tbody").find_all("tr")
    assert [[td.text for td in tr.find_all("td")] for tr in body] == [
        ["PASS", "FAIL", "ERROR", "UNPROBED", "REFUSED", "-", "-", "-", "-"],
        ["-", "-", "-", "-", "-", "FAIL+UNPROBED", "-", "FAIL", "UNKNOWN"],
    ]
    links = [[(td.find_all("a") or [None])[0] for td in tr.find_all("td")] for tr in body]
    assert [a.attrs["href"] for a in links[0][:4]] == ["cases/000-save-load/", "#case-2", "#case-3", "#case-4"]
    sections = {s.attrs["id"]: s for s in page.find_all("section", cls="category")}
    assert list(sections) == ["failed", "unprobed", "framework"]
    assert {k: [a.attrs["data-verdict"] for a in s.find_all("article")] for k, s in sections.items()} == {
        "failed": ["FAIL", "FAIL", "FAIL", "UNKNOWN"],
        "unprobed": ["UNPROBED"],
        "framework": ["UNKNOWN"],
    }
    bitflip = page.by_id("case-2")
    assert bitflip.find("h3").text == f"FAIL {COMBO} · bitflip"
    assert bitflip.find(cls="detail").text == "integrity: a load returned wrong values"
    assert bitflip.find(cls="checker").text == "integrity FAIL: load of iter 2 returned wrong values"
    items = bitflip.find_all("dl", cls="evidence")
    assert [[dd.text for dd in dl.find_all("dd")] for dl in items] == [["save", str(i), "0"] for i in range(1, 6)]
    assert "and 2 more evidence items in results.json" in bitflip.text
    assert [a.text for a in bitflip.find(cls="links").find_all("a")] == [
        "case folder",
        "scenario",
        "history",
        "logs",
        "faults fired",
        "timeline",
    ]
    check_links(page, run_dir)
    assert page.by_id("case-3").find("a", href="cases/002-metadata/framework-error.txt").text == "traceback"
    assert "KeyError: 'manifest.json'" in page.by_id("case-3").find("dl", cls="evidence").text
    replays = [r.find("pre").text for r in page.find_all(cls="replay")]
    assert len(replays) == 6 and f"resilience run cases/bitflip/scenario.yaml --combos {COMBO}" in replays
    hostile = page.by_id("case-8")
    assert hostile.find(cls="checker").text == f"resume FAIL: {HOSTILE}"  # shown as text, whole
    assert not hostile.find_all(cls="detail")  # the row's detail only repeats its finding
    assert [dd.text for dd in hostile.find("dl", cls="evidence").find_all("dd")] == [HOSTILE]
    assert not page.find_all("img") and len(page.find_all("script")) == 1  # only the page's own script


def test_html_shows_counts_evidence_links_and_replays(run_dir):
    check_report_page(parse(_read(run_dir, "report.html")), run_dir)


def test_html_escapes_every_text_it_shows(run_dir):
    page = _read(run_dir, "report.html")
    assert "<script>document" not in page and "<img" not in page
    assert "&lt;script&gt;document.body.dataset.pwned = 1&lt;/script&gt; &amp; &#34;quoted&#34;" in page
    assert "<title>resilience matrix &lt;&amp;&gt;</title>" in page
    assert page.count("<script>") == 1  # the copy buttons'


def test_links_survive_moving_the_run_folder(run_dir, tmp_path):
    moved = shutil.move(run_dir, str(tmp_path / "elsewhere"))
    assert main(["report", moved]) == 1
    check_report_page(parse(_read(moved, "report.html")), moved)


def test_junit_counts_failures_and_errors_and_keeps_each_replay(run_dir):
    suite = ET.fromstring(_read(run_dir, "junit.xml"))
    assert suite.get("name") == "resilience matrix <&>"
    assert (suite.get("tests"), suite.get("failures"), suite.get("errors")) == ("9", "3", "3")
    cases = {(c.get("classname"), c.get("name")): c for c in suite.iter("testcase")}
    assert len(cases) == 9 and cases[(COMBO, "bitflip")].get("time") == "1.5"
    outcome = {k: [child.tag for child in c] for k, c in cases.items()}
    assert outcome == {
        (COMBO, "save-load"): [],
        (COMBO, "bitflip"): ["failure"],
        (COMBO, "metadata"): ["error"],
        (COMBO, "kill"): ["error"],
        (COMBO, "tp"): [],
        (OTHER, "io_error"): ["failure"],
        (OTHER, "pickle"): ["skipped"],
        (OTHER, HOSTILE): ["failure"],
        (OTHER, "hang"): ["error"],
    }
    failure = cases[(COMBO, "bitflip")].find("failure")
    assert failure.get("message") == "integrity: a load returned wrong values"
    assert failure.text.endswith("replay: resilience run cases/bitflip/scenario.yaml --combos " + COMBO)
    assert cases[(COMBO, "metadata")].find("error").get("message").startswith("UNKNOWN: framework error: KeyError")
    assert [cases[(c, n)].find("error").get("type") for c, n in [(COMBO, "metadata"), (OTHER, "hang")]] == [
        "framework error",
        "UNKNOWN",
    ]
    assert cases[(COMBO, "kill")].find("error").get("message").startswith("UNPROBED: configured fault never fired")
    assert cases[(OTHER, HOSTILE)].find("failure").get("message") == HOSTILE  # escaped, and read back whole
    props = {p.get("name"): p.get("value") for p in suite.iter("property")}
    assert props == {"status": "complete"}


def test_an_interrupted_run_says_so_in_every_report(tmp_path):
    folder = RunFolder.create(str(tmp_path), "stopped", dict(META))
    for row in ROWS[:2]:
        folder.append(ResultRow.from_dict(row))
    folder.finish(status=INTERRUPTED, why="SIGTERM")
    note = "INTERRUPTED (SIGTERM): 2 of 10 cases finished"
    md = (tmp_path / folder.path / "report.md").read_text()
    assert md.splitlines()[0] == "# resilience matrix <&> (interrupted)"
    assert f"**{note}**: the rows below are the cases that finished." in md
    assert "Verdicts: 2 cases: PASS 1, FAIL 1" in md
    assert (
        parse((tmp_path / folder.path / "report.html").read_text()).by_id("note").text
        == f"{note}: the rows below are the cases that finished."
    )
    suite = ET.fromstring((tmp_path / folder.path / "junit.xml").read_text())
    assert {p.get("name"): p.get("value") for p in suite.iter("property")} == {"status": "interrupted", "note": note}
    meta = json.loads((tmp_path / folder.path / "run.json").read_text())
    assert (meta["status"], meta["stopped_by"], meta["finished_cases"]) == ("interrupted", "SIGTERM", 2)
    assert "note" not in meta


def test_report_rebuilds_the_same_reports_and_exits_1_on_a_failing_row(run_dir, capsys):
    before = {name: _read(run_dir, name) for name in ("report.md", "junit.xml", "results.json")}
    assert main(["report", str(run_dir)]) == 1
    out = capsys.readouterr().out
    # PASS and REFUSED pass, N/A is on its own, and every FAILING verdict (UNKNOWN, UNPROBED) is not passed
    assert "2 passed, 1 N/A, 6 not passed (3 FAIL, 2 UNKNOWN, 1 UNPROBED)" in out
    assert f"FAIL: bitflip {COMBO}: integrity: a load returned wrong values" in out
    assert f"  replay: resilience run cases/bitflip/scenario.yaml --combos {COMBO}" in out
    assert {name: _read(run_dir, name) for name in before} == before


def test_a_fuzzing_run_counts_the_fault_kinds_drawn_and_where_they_fired():
    from resilience.report.fuzz_view import FaultDrawn
    from resilience.report.view import build

    faults = [
        [("rank_crash rank=1", "fired"), ("bit_flip seed=3", "never fired")],
        [("rank_crash rank=0", "never fired")],
        [("bit_flip seed=4", "fired"), ("bit_flip seed=5", "never fired")],
        [],
    ]
    verdicts = ["FAIL", "UNPROBED", "PASS", "PASS"]
    rows = [_row("scenarios", v, faults=[{"fault": f, "status": s} for f, s in fs]) for fs, v in zip(faults, verdicts)]
    meta = {"kind": "fuzz", "fuzz": {"modes": ["scenarios"], "timings": {"scenarios": {"seconds": 9, "shrinking": 0}}}}
    (mode,) = build(_typed(rows), meta).fuzz
    assert (mode.mode, mode.cases, mode.seconds) == ("scenarios", 4, 9.0)
    # rows of a run that kept no events: the kinds read from their faults
    assert [(f.kind, f.cases, f.fired) for f in mode.faults] == [
        ("bit_flip", 2, 1),
        ("rank_crash", 2, 1),
        ("no fault", 1, 0),
    ]
    # the events Hypothesis was told, kept on each row; the mode's events count rejected examples too
    for r, fs in zip(rows, faults):
        r["events"] = [f"fault: {k}" for k in dict.fromkeys(f.split()[0] for f, _ in fs)] + [f"verdict: {r['verdict']}"]
        r["phase"] = "searching"
    meta["fuzz"]["events"] = {
        "scenarios": {
            "fault: bit_flip": 2,
            "fault: truncate": 2,
            "rejected: nothing to damage": 2,
            "not run: no save to judge": 1,  # an example that ran no case is accounted for too
        }
    }
    meta["fuzz"]["timings"]["scenarios"].update(running={"searching": 7.5, "shrinking": 0.0})
    (mode,) = build(_typed(rows), meta).fuzz
    assert mode.faults == [
        FaultDrawn("bit_flip", 2, 1, [("PASS", 1, "pass"), ("FAIL", 1, "fail")]),
        FaultDrawn("rank_crash", 2, 1, [("FAIL", 1, "fail"), ("UNPROBED", 1, "unprobed")]),
        FaultDrawn("truncate", 0, 0, [], rejected=2),  # drawn only by examples that were rejected
        FaultDrawn("no fault", 1, 0, [("PASS", 1, "pass")]),
    ]
    assert (mode.rejected, mode.searching_cases, mode.accounted, mode.running, mode.generating) == (
        2,
        4,
        True,
        7.5,
        1.5,
    )
    page = parse(render_html(_typed(rows), meta))
    assert page.by_id("accounting").text.startswith(
        "scenarios: 4 cases run (4 searching + 0 shrinking), 2 examples rejected (generated, nothing to damage: "
        "not run), 1 example that saved nothing (no case to judge). Every case run is a row of All cases below"
    )
    truncate = page.by_id("faults-drawn").find("tr", **{"data-fault": "truncate"})
    assert [td.text for td in truncate.find_all("td")] == ["scenarios", "truncate", "0", "0", "", "2"]
    md = render_markdown(_typed(rows), meta)
    assert "| scenarios | rank_crash | 2 | 1 | FAIL 1, UNPROBED 1 |  |" in md
    assert "| scenarios | 4 | 4 | 0 | PASS 2, FAIL 1, UNPROBED 1 | 9.0 | 7.5 | 1.5 | 0.0 |  |" in md


def test_a_detail_that_only_repeats_its_findings_is_not_shown_and_errors_by_rank_keep_their_lines():
    from resilience.report.view import build

    errors = {"0": "RankFailure: save failed\n--- rank 0: OSError: [Errno 5]", "1": "RankFailure: save failed"}
    checkers = [
        {"checker": "saves", "status": "UNPROBED", "detail": "none acknowledged", "evidence": [{"errors": errors}]},
        {"checker": "faults", "status": "UNPROBED", "detail": "short_write never fired", "evidence": []},
    ]
    row = _row("short", "UNPROBED", "saves: none acknowledged; faults: short_write never fired", checkers=checkers)
    (case,) = build(_typed([row]), {}).cases
    assert case.detail_repeats  # both findings are written out under it
    assert case.findings[0].evidence == [[("errors", "0: " + errors["0"] + "\n1: " + errors["1"])]]
    page = parse(render_html(_typed([row]), {}))
    assert not page.by_id("case-1").find_all(cls="detail")
    assert "--- rank 0: OSError" in page.by_id("case-1").find("dl", cls="evidence").find("pre").text
    assert not build(_typed([dict(row, detail=row["detail"] + "; expect: iteration 2")]), {}).cases[0].detail_repeats


def test_counts_say_framework_errors_in_the_plural_and_long_column_names_wrap_after_their_colon():
    rows = [_row(f"metadata:{name}", "UNKNOWN", "framework error: KeyError") for name in ("manifest.json", ".metadata")]
    for r in rows:
        r["checkers"] = [{"checker": "framework", "status": "UNKNOWN", "detail": r["detail"], "evidence": []}]
    page = parse(render_html(_typed(rows), {}))
    assert page.by_id("headline").text == "0 passed, 2 not passed (2 UNKNOWN); 2 of the 2 UNKNOWN are framework errors"
    (chip,) = page.by_id("counts").find_all("li", **{"data-verdict": "framework error"})
    assert chip.text == "2 framework errors"
    heads = page.find("table", cls="matrix").find("thead").find_all("th")[1:]
    assert [th.text for th in heads] == ["metadata:manifest.json", "metadata:.metadata"]
    assert all(th.find_all("wbr") for th in heads)  # where the name may break


def test_in_print_links_show_their_target_and_may_wrap(run_dir):
    """On paper a link's target is printed after it (p.links a::after), so a long one must be allowed to wrap
    instead of running off the page; the copy buttons are left out and the matrix does not scroll."""
    style = parse(open(os.path.join(run_dir, "report.html")).read()).find("style").text
    printed = style[style.index("@media print") :]
    assert 'p.links a[href]::after{content:" (" attr(href) ")"' in printed
    assert "p.links a,table.cases td.links a{white-space:normal;overflow-wrap:anywhere}" in printed
    assert "button{display:none}" in printed and ".scroll{overflow:visible;border:none}" in printed


def test_a_warning_is_counted_as_passed_and_listed_apart_in_every_report():
    detail = "exceptions: the load in job 1 failed on damaged iter_0000003/rank_1.pt without naming it"
    rows = [_row("truncate", "WARN", detail), _row("bitflip", "PASS")]
    page = parse(render_html(_typed(rows), {}))
    assert page.by_id("headline").text == "2 passed (1 WARN), 0 not passed"
    (chip,) = page.by_id("counts").find_all("li", **{"data-verdict": "WARN"})
    assert chip.text == "1 WARN"
    assert detail in page.by_id("warned").text
    md = render_markdown(_typed(rows), {})
    assert "## Passed with a warning (1)" in md and f"- {COMBO} · truncate: {detail}" in md
    assert f"| {COMBO} | WARN | PASS |" in md.splitlines()


def test_culprits_are_written_out_as_lines_in_the_html_the_markdown_and_junit():
    from resilience.report.junit import render_junit

    said = "rmtree step-2 by rank 0 (pid 812, main thread) in job 0 at 10:00:01.250 destroyed step-2/a.distcp"
    lost = {
        "acknowledged": 2,
        "problem": "an acknowledged save was lost",
        "culprits": [{"op": "rmtree", "culprit": said}],
    }
    checkers = [{"checker": "durability", "status": "FAIL", "detail": "1 of 1 loads lost", "evidence": [lost]}]
    rows = _typed([_row("kill", "FAIL", "durability: 1 of 1 loads lost", checkers=checkers)])
    page = parse(render_html(rows, {}))
    assert said in [pre.text for pre in page.by_id("case-1").find("dl", cls="evidence").find_all("pre")]
    assert said in render_markdown(rows, {})
    [case] = ET.fromstring(render_junit(rows, {})).iter("testcase")
    assert f"culprit: durability: {said}" in case.find("failure").text.splitlines()
