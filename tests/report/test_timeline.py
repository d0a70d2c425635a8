"""timeline.html of a case folder, from a hand-written history, fault firings and both kinds of file-operation
log: one lane per rank and per writer thread or process, operations as bars (an uncompleted one marked),
writes to one file folded into one bar, fault firings and kills marked, every text escaped."""

from __future__ import annotations

import json
import os

from resilience.faults.oplog import OpLog
from resilience.history import case_history
from resilience.report.timeline import read_case, write_timeline

from .dom import parse

T = 1_000.0  # wall-clock seconds of the history
OFFSET = 900.0  # wall minus monotonic: an operation logged at monotonic 100 s happened at T
HOSTILE = '<img src=x onerror="document.body.dataset.pwned = 1">'  # no slash: it is a file name too


def _event(t, f, process, kind, job=0, **value):
    return {"f": f, "job": job, "process": process, "time": T + t, "type": kind, "value": value}


def _runner(t, type_, **value):
    """A job event of the runner: its own `job` field is 0, the job it speaks of is in the value."""
    return {"f": "job", "job": 0, "process": "runner", "time": T + t, "type": type_, "value": value}


HISTORY = [
    _runner(0.0, "invoke", job=0, kind="train", topology="tp2pp1dp1"),
    _event(0.1, "train", 0, "ok", iteration=2),
    _event(0.1, "train", 1, "ok", iteration=2),
    _event(0.2, "save", 0, "invoke", iteration=2),
    _event(0.2, "save", 1, "invoke", iteration=2),
    _event(0.5, "save", 0, "ok", iteration=2),
    _event(0.6, "save", 1, "ok", iteration=2),
    _event(0.7, "save", 0, "invoke", iteration=3),
    _event(0.7, "save", 1, "invoke", iteration=3),  # rank 1 is killed before it completes
    _event(0.9, "save", 0, "fail", iteration=3, error=HOSTILE),
    _runner(1.0, "info", job=0, signals={"1": 9}, statuses={"1": "signal"}),
    _event(1.1, "corrupt", "runner", "ok", action="flip", file=HOSTILE),
    _runner(1.2, "invoke", job=1, kind="resume", topology="tp2pp1dp1"),
    _event(1.3, "load", 0, "invoke", job=1),
    _event(1.3, "load", 1, "invoke", job=1),
    _event(1.6, "load", 0, "ok", job=1, iteration=2),
    _event(1.6, "load", 1, "ok", job=1, iteration=2),
    _runner(1.7, "ok", job=1, signals={}, statuses={}),
]
FIRINGS = [
    {"action": "sigkill", "kind": "rank_crash", "rank": 1, "text": "rank_crash rank=1 at_byte=256", "time": T + 0.8}
]


def _case(tmp_path) -> str:
    case = tmp_path / "case"
    case.mkdir()
    (case / "history.jsonl").write_text("".join(json.dumps(e) + "\n" for e in HISTORY))
    (case / "faults.jsonl").write_text("".join(json.dumps(f) + "\n" for f in FIRINGS))
    return str(case)


def _seam_log(case: str) -> None:
    """Rank 0's operations of job 0 through the seam, at monotonic 100.3 s on: three writes of one file by the
    writer thread, an fsync, a rename."""
    log = OpLog(os.path.join(case, "oplog", "job0"), rank=0)
    try:
        lines = (
            [{"op": "create", "path": "/c/ckpt/x.distcp", "thread": "writer"}]
            + [
                {"op": "write", "path": "/c/ckpt/x.distcp", "thread": "writer", "offset": 4 * i, "length": 4}
                for i in range(3)
            ]
            + [
                {"op": "fsync", "path": "/c/ckpt/x.distcp", "thread": "writer"},
                {"op": "rename", "path": "/c/ckpt/.tmp", "dst": "/c/ckpt/" + HOSTILE, "thread": "main"},
            ]
        )
        with open(os.path.join(log.folder, "ops.rank0.jsonl"), "w") as f:
            for i, line in enumerate(lines):
                f.write(json.dumps(dict(line, rank=0, seq=i + 1, t=int((100.3 + i * 0.01) * 1e9))) + "\n")
    finally:
        log.close()


def _fuse_log(case: str) -> None:
    """Rank 1's operations of job 0 under the file system: two processes (the rank and a child it ran), an
    injected write error, the kill."""
    folder = os.path.join(case, "fuse", "job0")
    os.makedirs(folder)
    recs = [
        {"op": "write", "rank": 1, "pid": 11, "thread": "writer", "path": "/c/ckpt/y.distcp"},
        {
            "op": "write",
            "rank": 1,
            "pid": 11,
            "thread": "writer",
            "path": "/c/ckpt/y.distcp",
            "errno": "ENOSPC",
            "fault": "io_error errno=ENOSPC",
        },
        {"op": "fsync", "rank": 1, "pid": 12, "thread": "main", "path": "/c/ckpt/z"},
        {
            "op": "sigkill",
            "rank": 1,
            "pid": 11,
            "thread": "writer",
            "path": "/c/ckpt/y.distcp",
            "fault": "rank_crash rank=1",
        },
    ]
    with open(os.path.join(folder, "fuse.jsonl"), "w") as f:
        for i, r in enumerate(recs):
            f.write(json.dumps(dict(r, seq=i + 1, t=int((100.5 + i * 0.1) * 1e9))) + "\n")


def test_lanes_bars_and_marks_from_the_history_firings_and_logs(tmp_path):
    case = _case(tmp_path)
    _seam_log(case)
    _fuse_log(case)
    tl = read_case(case, OFFSET)
    assert tl.lanes == [
        "runner",
        "rank 0",
        "rank 0 · main",
        "rank 0 · writer",
        "rank 1",
        "rank 1 · main · pid 12",
        "rank 1 · writer · pid 11",
    ]
    ops = {(b.lane, b.label): (round(b.start - T, 3), round(b.end - T, 3), b.outcome) for b in tl.bars}
    assert ops[("rank 0", "save it 2")] == (0.2, 0.5, "ok")
    assert ops[("rank 0", "save it 3")] == (0.7, 0.9, "fail")
    assert ops[("rank 1", "save it 3")] == (0.7, 1.0, "unknown")  # no completion: drawn to the job's end
    assert ops[("rank 0", "train it 2")] == (0.0, 0.1, "ok")  # no invoke: from the job's start
    assert ops[("rank 1", "load it 2")] == (1.3, 1.6, "ok")
    assert ops[("rank 0 · writer", "write x.distcp x3")] == (0.31, 0.33, "ok")  # three writes, one bar
    assert ops[("rank 0 · writer", "fsync x.distcp")][2] == "ok"
    assert ops[("rank 0 · main", f"rename .tmp -> {HOSTILE}")][0] == 0.35
    assert ops[("rank 1 · writer · pid 11", "write y.distcp")][2] == "fail"  # the injected error is not folded in
    assert ops[("rank 1 · main · pid 12", "fsync z")][:2] == (0.7, 0.7)
    marks = sorted((m.lane, m.kind, round(m.at - T, 3)) for m in tl.marks)
    assert marks == [
        ("rank 1", "kill", 0.8),
        ("rank 1", "kill", 1.0),
        ("rank 1 · writer · pid 11", "kill", 0.8),
        ("runner", "damage", 1.1),
    ]
    assert [(j.label, round(j.start - T, 3), round(j.end - T, 3), j.outcome) for j in tl.jobs] == [
        ("job 0 train tp2pp1dp1", 0.0, 1.0, "unknown"),
        ("job 1 resume tp2pp1dp1", 1.2, 1.7, "ok"),
    ]


def test_the_page_draws_every_lane_and_lists_every_event_as_escaped_text(tmp_path):
    case = _case(tmp_path)
    _seam_log(case)
    path = write_timeline(case, clock_offset=OFFSET)
    assert path == os.path.join(case, "timeline.html")
    text = open(path).read()
    assert "<img" not in text and "&lt;img src=x onerror=&#34;document.body.dataset.pwned = 1&#34;&gt;" in text
    page = parse(text)
    svg = page.by_id("timeline")
    assert [g.attrs["data-lane"] for g in svg.find_all("g", cls="lane")] == [
        "runner",
        "rank 0",
        "rank 0 · main",
        "rank 0 · writer",
        "rank 1",
    ]
    # 4 operations of each rank, the seam's create, 3 writes as one bar, fsync, rename; 2 kills, 1 damage at rest
    assert len(svg.find_all("g", cls="op")) == 12 and len(svg.find_all("g", cls="mark")) == 3
    assert [r.text for r in svg.find_all("rect", cls="unknown")] == [
        "save it 3 (unknown, 0.700-1.000 s) no completion recorded"
    ]
    rows = [[td.text for td in tr.find_all("td")] for tr in page.by_id("events").find("tbody").find_all("tr")]
    assert len(rows) == 12 + 3 + 2 and [float(r[0]) for r in rows] == sorted(float(r[0]) for r in rows)
    assert [
        "0.350",
        "rank 0 · main",
        f"rename .tmp -> {HOSTILE}",
        "ok",
        "0.000 s",
        f"/c/ckpt/.tmp -> /c/ckpt/{HOSTILE}",
    ] in rows
    assert ["0.700", "rank 0", "save it 3", "fail", "0.200 s"] in [r[:5] for r in rows]
    assert ["0.800", "rank 1", "sigkill: rank_crash rank=1 at_byte=256", "kill", "", ""] in rows
    assert [a.attrs["href"] for a in page.find_all("a")] == ["scenario.yaml", "history.jsonl", "./"]


def test_a_case_without_history_has_no_timeline_and_a_broken_log_still_gives_a_page(tmp_path):
    assert write_timeline(str(tmp_path)) is None and not os.listdir(tmp_path)
    case = _case(tmp_path)
    with open(os.path.join(case, "history.jsonl"), "a") as f:
        f.write('{"f": "save", "process": 0, "time": "soon", "type": "ok"}\n')  # a time that is not a number
    page = parse(open(write_timeline(case, clock_offset=OFFSET)).read())
    assert page.by_id("error").text.startswith("the timeline could not be drawn: ValueError")


def test_a_history_already_read_is_drawn_without_reading_the_file_again(tmp_path, monkeypatch):
    case = _case(tmp_path)
    _seam_log(case)
    history = case_history(case)
    drawn = read_case(case, OFFSET)
    opened = []
    real_open = open
    monkeypatch.setattr("builtins.open", lambda path, *a, **k: opened.append(str(path)) or real_open(path, *a, **k))
    given = read_case(case, OFFSET, history)
    assert given == drawn  # the same picture as from the folder
    assert write_timeline(case, clock_offset=OFFSET, history=history) == os.path.join(case, "timeline.html")
    assert not [p for p in opened if p.endswith("history.jsonl")] and opened  # faults.jsonl, the logs: read
