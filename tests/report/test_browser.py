"""The reports as a person sees them: headless Chromium renders report.html and timeline.html (scripts run),
and the tests read the DOM it built (--dump-dom) for the counts, the evidence, the links and the copy
buttons, and check that hostile names ran nothing. RESILIENCE_SCREENSHOTS=1 also keeps a screenshot of each
page in its run folder (report.png, the case folder's timeline.png) and prints where."""

from __future__ import annotations

import json
import os

import pytest

from resilience.cli import main
from resilience.report.browser import dump_dom, screenshot

from .dom import parse
from .test_content import check_report_page, make_run
from .test_timeline import OFFSET, _case, _fuse_log, _seam_log

SHOTS = os.environ.get("RESILIENCE_SCREENSHOTS") == "1"


def _render(page: str, png: str):
    """The page's DOM as the browser built it; with RESILIENCE_SCREENSHOTS=1 a screenshot beside it too."""
    dom = parse(dump_dom(page))
    if SHOTS:
        print(f"screenshot: {screenshot(page, os.path.join(os.path.dirname(page), png))}")
    return dom


def _ran_nothing_hostile(dom) -> None:
    body = dom.find("body")
    assert "data-pwned" not in body.attrs, "a name or detail from a scenario ran as script"


def test_report_html_in_a_browser_shows_counts_evidence_links_and_copy_buttons(tmp_path, browser):
    run_dir = make_run(tmp_path)
    dom = _render(os.path.join(run_dir, "report.html"), "report.png")
    check_report_page(dom, run_dir)  # the same reading as of the file, now of what the browser built
    _ran_nothing_hostile(dom)
    buttons = dom.find_all("button", cls="copy")
    assert len(buttons) == 6 and {b.text for b in buttons} == {"copy"}  # one per replay command, added by script
    assert all(b.attrs.get("type") == "button" for b in buttons)


def test_report_screenshot_goes_into_the_run_folder(tmp_path, browser, capsys):
    run_dir = make_run(tmp_path)
    assert main(["report", run_dir, "--screenshot"]) == 1  # the rows have failures
    png = os.path.join(run_dir, "report.png")
    assert f"screenshot: {png}" in capsys.readouterr().out
    with open(png, "rb") as f:
        assert f.read(8) == b"\x89PNG\r\n\x1a\n"


def test_timeline_in_a_browser_draws_lanes_bars_and_marks(tmp_path, browser):
    case = _case(tmp_path)
    _seam_log(case)
    _fuse_log(case)
    from resilience.report.timeline import write_timeline

    dom = _render(write_timeline(case, clock_offset=OFFSET), "timeline.png")
    _ran_nothing_hostile(dom)
    svg = dom.by_id("timeline")
    assert [g.attrs["data-lane"] for g in svg.find_all("g", cls="lane")] == [
        "runner",
        "rank 0",
        "rank 0 · main",
        "rank 0 · writer",
        "rank 1",
        "rank 1 · main · pid 12",
        "rank 1 · writer · pid 11",
    ]
    marks = {" ".join(sorted(g.classes)) for g in svg.find_all("g", cls="mark")}
    assert marks == {"mark mark-kill", "mark mark-damage"}
    labels = [t.text for t in svg.find_all("text", cls="bar-label")]
    assert "save it 2" in labels and "load it 2" in labels


@pytest.mark.multiprocess
def test_a_failing_matrix_report_says_what_failed_why_where_and_how_to_replay(tmp_path, browser):
    """A real failing run: a backend that writes its tracker before the data, killed mid-save."""
    code = main(
        [
            "matrix",
            "--backend",
            "broken:tracker_before_data",
            "--combos",
            "GLOBAL/torch_dist/sync",
            "--faults",
            "kill",
            "--transitions",
            "none",
            "--out",
            str(tmp_path),
        ]
    )
    assert code == 1
    (run_dir,) = [str(p) for p in tmp_path.iterdir() if p.is_dir()]
    dom = _render(os.path.join(run_dir, "report.html"), "report.png")
    assert dom.by_id("headline").text == "0 passed, 1 not passed (1 FAIL)"
    assert {
        li.attrs.get("data-verdict", "cases"): li.find(cls="n").text for li in dom.by_id("counts").find_all("li")
    } == {"cases": "1", "FAIL": "1"}
    case = dom.by_id("case-1")
    # where the kill lands decides which checker sees it first: a lost save, or torn data loaded as values
    first = case.find(cls="checker").text
    assert first.startswith(("durability FAIL: ", "integrity FAIL: ")), first
    assert not case.find_all(cls="detail")  # the row's detail only repeats the one failing checker
    if first.startswith("durability"):
        assert "acknowledged" in case.find("dl", cls="evidence").text  # what was lost, written out
    links = {a.text: a.attrs["href"] for a in case.find(cls="links").find_all("a")}
    assert set(links) == {"case folder", "scenario", "history", "logs", "faults fired", "timeline"}
    assert all(os.path.exists(os.path.join(run_dir, href)) for href in links.values())
    (row,) = json.load(open(os.path.join(run_dir, "results.json")))
    assert case.find(cls="replay").find("pre").text == row["replay"]
    assert case.find("button", cls="copy").text == "copy"
    timeline = _render(os.path.join(run_dir, links["timeline"]), "timeline.png")
    svg = timeline.by_id("timeline")
    assert {"runner", "rank 0", "rank 1"} <= {g.attrs["data-lane"] for g in svg.find_all("g", cls="lane")}
    kills = svg.find_all("g", cls="mark-kill")
    assert kills and any("rank_crash" in g.find("title").text for g in kills)  # the kill the fault made


def test_fuzz_report_in_a_browser_accounts_for_every_case(tmp_path, monkeypatch, browser):
    from resilience.fuzz import engine
    from resilience.fuzz.options import FuzzOptions
    from tests.fuzz.test_fuzz_command import _fake_runs, check_fuzz_page

    _fake_runs(monkeypatch, fail_when=lambda s: any(step.kind == "crash" for step in s.steps))
    out = engine.fuzz(FuzzOptions(examples=30, seed=3, out=str(tmp_path), modes=("scenarios",)))
    dom = _render(os.path.join(out.run_dir, "report.html"), "report.png")
    check_fuzz_page(dom, out.run_dir)
    assert len(dom.find_all("button", cls="copy")) == 1  # the minimal failure's replay
