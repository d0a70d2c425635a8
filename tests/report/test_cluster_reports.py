"""The validate and corpus reports: a validation's shared folder written by hand (two nodes, two torchrun
attempts, one kill, one wrong load) and a corpus verification with a wrong, a failed and a newly refused
load, rendered and read back: attempts, restarts, nodes, what was killed when, and each wrong load with its
cause on the same line as its FAIL. No ranks: only what the reports say is under test; the same pages are
then read as headless Chromium rendered them."""

from __future__ import annotations

import json
import os

import pytest

from resilience.cluster.spec import ClusterPlan, SharedFolder, write_json
from resilience.cluster.verdicts import finish, render_summary
from resilience.report.browser import dump_dom
from resilience.report.causes import cause_of
from resilience.report.corpus import write_corpus_report

from .dom import parse

KILLED, WRONG = "GLOBAL/torch_dist/sync", "LEGACY/torch/sync"
T0 = 1_800_000_000.0


def _row(combo: str, verdict: str, detail: str, checkers: list[dict]) -> dict:
    return {
        "scenario": "cluster-kill-resume",
        "combo": combo,
        "column": "kill@write",
        "fault": "rank_crash",
        "transition": None,
        "verdict": verdict,
        "detail": detail,
        "seconds": 2.0,
        "checkers": checkers,
        "case_dir": "",
        "replay": "resilience validate --local",
    }


def make_validation(tmp_path) -> SharedFolder:
    """The shared folder of a finished two-node validation: GLOBAL killed at phase write on attempt 0 and
    resumed on attempt 1 (PASS); LEGACY resumed to a state that differs from its save (FAIL)."""
    plan = ClusterPlan(combos=(KILLED, WRONG))
    shared_folder = SharedFolder(str(tmp_path / "shared"))
    shared_folder.create()
    write_json(
        shared_folder.plan,
        {
            "plan": plan.to_dict(),
            "run_id": "run-7",
            "world": 4,
            "topology": {"tp": 2, "pp": 1, "dp": 2},
            "started": T0,
            "command": "torchrun ...",
        },
    )
    seats = [(0, "alpha", 0), (1, "alpha", 0), (2, "beta", 1), (3, "beta", 1)]
    write_json(
        shared_folder.path("attempts.json"),
        [
            {
                "attempt": a,
                "time": T0 + 30 * a,
                "ranks": [
                    {"rank": r, "restart_count": a, "group_rank": g, "host": h, "pid": 1000 * (a + 1) + r}
                    for r, h, g in seats
                ],
            }
            for a in (0, 1)
        ],
    )
    write_json(shared_folder.state(KILLED), {"save_started": 0, "kill_armed": True, "resume_started": 1})
    write_json(shared_folder.state(WRONG), {"save_started": 0, "kill_armed": True, "save_done": 0, "resume_started": 1})
    with open(shared_folder.faults(KILLED, 3), "w") as f:
        f.write(
            json.dumps(
                {"kind": "rank_crash", "rank": 3, "pid": 1003, "time": T0 + 12.5, "phase": "write", "action": "sigkill"}
            )
            + "\n"
        )
    write_json(shared_folder.result(KILLED), _row(KILLED, "PASS", "the save of iteration 4 was cut by the kill", []))
    write_json(
        shared_folder.result(WRONG),
        _row(
            WRONG,
            "FAIL",
            "resume_equivalence: 1 mismatches after resume",
            [
                {
                    "checker": "resume_equivalence",
                    "status": "FAIL",
                    "detail": "1 mismatches after resume",
                    "evidence": [{"load_job": 1, "iteration": 4, "problem": "state differs from the save"}],
                },
                {"checker": "newest_valid", "status": "PASS", "detail": "loaded iteration 4", "evidence": []},
            ],
        ),
    )
    assert finish(plan, shared_folder, 1) == 1
    return shared_folder


def check_validate_page(dom) -> None:
    facts = {d.attrs["data-fact"]: d.find("dd").text for d in dom.by_id("cluster-facts").find_all("div")}
    assert facts == {
        "run id": "run-7",
        "world": "4",
        "topology": "tp2pp1dp2",
        "nodes": "2",
        "torchrun attempts": "2",
        "restarts": "1",
        "kills": "1",
    }
    (kill,) = dom.by_id("kills").find("tbody").find_all("tr")
    assert [td.text for td in kill.find_all("td")] == [KILLED, "0", "3", "1", "beta", "1003", "12.5 s", "phase write"]
    attempts = dom.by_id("attempts").find("tbody").find_all("tr")
    assert [(tr.find_all("td")[0].text, tr.find_all("td")[3].text, tr.find_all("td")[5].text) for tr in attempts] == [
        ("0", "alpha", "1000, 1001"),
        ("0", "beta", "1002, 1003"),
        ("1", "alpha", "2000, 2001"),
        ("1", "beta", "2002, 2003"),
    ]
    loads = {tr.attrs["data-combo"]: tr for tr in dom.by_id("loads").find("tbody").find_all("tr")}
    bad = loads[WRONG].find("td", cls="verdict")  # the FAIL and its cause in one cell, one line
    assert bad.find(cls="chip").text == "FAIL" and bad.find("b", cls="cause").text == "value"
    assert "state differs from the save" in bad.text
    assert [td.text for td in loads[KILLED].find_all("td")[:4]] == [KILLED, "attempt 0", "fired", "attempt 1"]
    assert not loads[KILLED].find_all("b", cls="cause")


def test_validate_report_shows_nodes_attempts_restarts_kills_and_why_a_load_was_wrong(tmp_path, capsys):
    shared_folder = make_validation(tmp_path)
    page = parse(open(os.path.join(shared_folder.report, "report.html")).read())
    check_validate_page(page)
    # where the evidence lies: the shared folder beside the report, linked from it
    files = {a.text: a.attrs["href"] for a in page.by_id("cluster-files").find_all("a")}
    assert files == {
        "histories": "../history/",
        "kills fired": "../faults/",
        "attempts": "../attempts.json",
        "checkpoints": "../ckpt/",
    }
    assert all(os.path.exists(os.path.join(shared_folder.report, href)) for href in files.values())
    md = open(os.path.join(shared_folder.report, "report.md")).read()
    assert "evidence in the shared folder: [histories](../history/) · [kills fired](../faults/) · [attempts]" in md
    assert f"| {WRONG} | attempt 0 | armed, never fired | attempt 1 | FAIL **value**: resume_equivalence:" in md
    assert (
        "- killed: rank 3 (node 1, beta, pid 1003) at phase write of GLOBAL/torch_dist/sync on attempt 0, "
        "12.5 s into the run" in md
    )
    summary = json.load(open(shared_folder.summary))
    assert summary["restarts"] == 1 and [n["host"] for n in summary["nodes"]] == ["alpha", "beta"]
    text = render_summary(summary, shared_folder.root)
    assert "  nodes: node 0 on alpha (ranks 0, 1); node 1 on beta (ranks 2, 3)" in text
    assert "  killed: rank 3 (node 1, beta, pid 1003) at phase write of GLOBAL/torch_dist/sync on attempt 0" in text
    (line,) = [ln for ln in text.splitlines() if ln.strip().startswith(WRONG)]
    assert "FAIL" in line and "value: resume_equivalence:" in line


CHECKS = [
    {
        "entry": "tp2pp1dp1/GLOBAL-torch_dist-sync",
        "combo": KILLED,
        "saved_on": "tp2pp1dp1",
        "load_on": "tp2pp1dp1",
        "promised": "load",
        "outcome": "bit-exact",
        "ok": True,
        "detail": "iteration 3",
        "cause": "",
    },
    {
        "entry": "tp2pp1dp1/GLOBAL-torch_dist-sync",
        "combo": KILLED,
        "saved_on": "tp2pp1dp1",
        "load_on": "tp1pp1dp2",
        "promised": "load",
        "outcome": "wrong",
        "ok": False,
        "cause": "value",
        "detail": "values differ from the corpus in 1 keys: optimizer.exp_avg.decoder.layers.1.mlp.linear_fc1.weight",
    },
    {
        "entry": "tp2pp1dp1/LEGACY-torch-sync",
        "combo": WRONG,
        "saved_on": "tp2pp1dp1",
        "load_on": "tp2pp1dp1",
        "expected": "load",
        "outcome": "failed",
        "ok": False,
        "cause": "",  # written before causes were recorded
        "detail": "IntegrityError: iter_0000003/mp_rank_00/model_optim_rng.pt: checksum failed: xxh3-128 abc != def",
    },
    {
        "entry": "tp2pp1dp1/LEGACY-torch-sync",
        "combo": WRONG,
        "saved_on": "tp2pp1dp1",
        "load_on": "tp1pp1dp2",
        "promised": "refuse",
        "outcome": "refused clearly",
        "ok": True,
        "detail": "TopologyChangeRefused: tp 2 -> 1",
    },
    {
        "entry": "tp1pp1dp2/GLOBAL-torch_dist-sync",
        "combo": KILLED,
        "saved_on": "tp1pp1dp2",
        "load_on": "tp2pp1dp1",
        "promised": "load",
        "outcome": "refused clearly",
        "ok": False,
        "cause": "refused",
        "detail": "TopologyChangeRefused: will not load on tp2pp1dp1",
    },
]
VERIFICATION = {
    "kind": "resilience-corpus-verification",
    "format_version": 1,
    "folder": "/corpora/golden",
    "written_by": {"python": "3.11.2", "torch": "2.12.0", "resilience": "0.3"},
    "read_by": {"python": "3.11.2", "torch": "2.13.0", "resilience": "0.3"},
    "versions": "torch 2.12.0 -> 2.13.0",
    "ok": False,
    "seconds": 12.0,
    "checks": CHECKS,
    "counts": {"bit-exact": 1, "refused clearly": 1, "wrong": 1, "failed": 1, "newly refused": 1},
}


def check_corpus_page(dom) -> None:
    assert dom.by_id("headline").text == "5 loads: 2 as expected, 3 not (torch 2.12.0 -> 2.13.0)"
    facts = dict(zip((dt.text for dt in dom.find_all("dt")), (dd.text for dd in dom.find_all("dd"))))
    assert facts["replay"] == "resilience corpus verify /corpora/golden"  # how to run it again
    assert {li.attrs["data-outcome"]: li.find(cls="n").text for li in dom.by_id("counts").find_all("li")} == {
        "bit-exact": "1",
        "refused clearly": "1",
        "wrong": "1",
        "failed": "1",
        "newly refused": "1",
    }
    rows = dom.by_id("loads").find("tbody").find_all("tr")
    cells = [
        (r.attrs["data-load-on"], r.find(cls="chip").text, "".join(b.text for b in r.find_all("b", cls="cause")))
        for r in rows
    ]
    assert cells == [
        ("tp2pp1dp1", "PASS", ""),
        ("tp1pp1dp2", "FAIL", "value"),
        ("tp2pp1dp1", "FAIL", "checksum"),
        ("tp1pp1dp2", "REFUSED", ""),
        ("tp2pp1dp1", "FAIL", "refused"),
    ]
    assert "linear_fc1.weight" in rows[1].find("td", cls="verdict").text  # which value, on the FAIL's line
    assert "model_optim_rng.pt: checksum failed" in rows[2].find("td", cls="verdict").text


def test_corpus_report_shows_each_load_and_the_cause_beside_its_fail(tmp_path):
    paths = write_corpus_report(str(tmp_path), VERIFICATION)
    check_corpus_page(parse(open(paths["report.html"]).read()))
    md = open(paths["report.md"]).read()
    assert "| tp2pp1dp1/LEGACY-torch-sync | tp2pp1dp1 | tp2pp1dp1 | load | failed | FAIL **checksum**: " in md
    assert json.load(open(paths["verification.json"]))["ok"] is False


@pytest.mark.parametrize(
    "text, cause",
    [
        ("IntegrityError: x.pt: checksum failed: xxh3-128 a != b", "checksum"),
        ("RuntimeError: Error(s): size mismatch for w: copying a param with shape torch.Size([4, 2])", "shape"),
        ("IntegrityError: x: content: model.w: stored torch.bfloat16, expected torch.float32", "dtype"),
        ("RuntimeError: Missing key in checkpoint state_dict: optimizer.main_param.w.", "missing"),
        ("PytorchStreamReader failed reading zip archive: failed finding central directory", "truncated"),
        ("values differ from the corpus in 3 keys: a, b, c", "value"),
        ("RNG state differs from the corpus", "rng"),
        ("loaded iteration 2, but the newest valid checkpoint on disk is iteration 4", "iteration"),
        ("1 of 1 loads lost an acknowledged save", "lost"),
        ("a rank failed: Segmentation fault", "error"),
    ],
)
def test_a_cause_is_one_word(text, cause):
    assert cause_of(text) == cause


def test_validate_and_corpus_reports_in_a_browser(tmp_path, browser):
    shared_folder = make_validation(tmp_path)
    check_validate_page(parse(dump_dom(os.path.join(shared_folder.report, "report.html"))))
    paths = write_corpus_report(str(tmp_path), VERIFICATION)
    check_corpus_page(parse(dump_dom(paths["report.html"])))
