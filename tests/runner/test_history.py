"""resilience.history: the one place a history is recorded, merged and read. Its reader drops every line
that is not an event and keeps the others in the order they were written; the merge puts a job's ranks in
time order, then the job's firings, then an info for each invoke left open."""

import json
import os

import pytest

from resilience.history import (
    HISTORY_FILE,
    Event,
    EventLog,
    case_history,
    close_open_invokes,
    merge_job,
    rank_events,
    read_events,
)

GOOD = {"type": "ok", "f": "save", "process": 0, "job": 1, "time": 5.0, "value": {"iteration": 2}}


def test_events_survive_and_a_torn_line_is_dropped(tmp_path):
    path = str(tmp_path / "h.jsonl")
    log = EventLog(path, job=1, process=0)
    log.invoke("save", iteration=3)
    log.ok("save", iteration=3)
    log.invoke("save", iteration=4)
    log.close()
    with open(path, "a") as f:
        f.write('{"type": "ok", "f": "sa')  # the writer died mid-event
    events = read_events(path)
    assert [(e.type, e.f, e.value["iteration"]) for e in events] == [
        ("invoke", "save", 3),
        ("ok", "save", 3),
        ("invoke", "save", 4),
    ]
    info = close_open_invokes(events, "rank 0 killed")
    assert (
        len(info) == 1
        and info[0].type == "info"
        and info[0].value == {"iteration": 4, "outcome": "unknown", "why": "rank 0 killed"}
    )


def test_missing_history_reads_as_empty(tmp_path):
    assert read_events(os.path.join(tmp_path, "none.jsonl")) == []
    assert case_history(str(tmp_path)) == []


@pytest.mark.parametrize(
    "line, why",
    [
        ('{"type": "ok", "f": "sa', "torn by a kill"),
        ("", "empty"),
        ("\n", "blank"),
        ("not json at all", "not JSON"),
        ("[1, 2, 3]", "a list"),
        ("42", "a number"),
        ('"ok"', "a string"),
        ("null", "null"),
        (json.dumps({k: v for k, v in GOOD.items() if k != "type"}), "no type"),
        (json.dumps({k: v for k, v in GOOD.items() if k != "f"}), "no operation"),
        (json.dumps({k: v for k, v in GOOD.items() if k != "process"}), "no process"),
        (json.dumps(dict(GOOD, value=[1, 2])), "a value that is a list"),
        (json.dumps(dict(GOOD, value="x")), "a value that is a string"),
        (json.dumps(dict(GOOD, value=None)), "a value that is null"),
    ],
)
def test_a_line_that_is_not_an_event_is_dropped_and_the_rest_kept(tmp_path, line, why):
    path = tmp_path / "h.jsonl"
    before, after = dict(GOOD, time=1.0), dict(GOOD, time=2.0)
    path.write_text(json.dumps(before) + "\n" + line + "\n" + json.dumps(after) + "\n")
    assert [e.to_dict() for e in read_events(str(path))] == [before, after], why


def test_undecodable_bytes_do_not_stop_the_reader(tmp_path):
    path = tmp_path / "h.jsonl"
    path.write_bytes(b"\xff\xfe garbage\n" + json.dumps(GOOD).encode() + b"\n")
    assert [e.to_dict() for e in read_events(str(path))] == [GOOD]


@pytest.mark.parametrize(
    "fields, expected",
    [
        ({}, {"value": {}, "job": 0, "time": 0.0}),  # only type, f and process are needed
        ({"value": {"a": 1}, "job": 3, "time": 7.5}, {"value": {"a": 1}, "job": 3, "time": 7.5}),
    ],
)
def test_the_optional_fields_have_defaults(tmp_path, fields, expected):
    path = tmp_path / "h.jsonl"
    path.write_text(json.dumps({"type": "info", "f": "case", "process": "runner", **fields}) + "\n")
    (e,) = read_events(str(path))
    assert (e.value, e.job, e.time) == (expected["value"], expected["job"], expected["time"])


def test_the_reader_keeps_the_order_written_not_the_order_of_time(tmp_path):
    path = tmp_path / "h.jsonl"
    times = [3.0, 1.0, 2.0]
    path.write_text("".join(json.dumps(dict(GOOD, time=t)) + "\n" for t in times))
    assert [e.time for e in read_events(str(path))] == times


def test_a_round_trip_through_the_log_keeps_every_field(tmp_path):
    path = str(tmp_path / "h.jsonl")
    log = EventLog(path, job=2, process=1)
    sent = log.fail("load", error="boom", path=tmp_path, ranks=(0, 1), nested={3: {"x": None}})
    log.close()
    (got,) = read_events(path)
    assert got.to_dict() == sent.to_dict()
    assert got.value == {"error": "boom", "path": str(tmp_path), "ranks": [0, 1], "nested": {"3": {"x": None}}}


def test_a_closed_log_refuses_to_write(tmp_path):
    log = EventLog(str(tmp_path / "h.jsonl"))
    log.close()
    log.close()  # twice is fine
    with pytest.raises(ValueError, match="closed"):
        log.info("case")


def _rank_log(tmp_path, rank: int, rows: list[tuple[float, str, str]]) -> str:
    path = str(tmp_path / f"rank{rank}.jsonl")
    with open(path, "w") as f:
        for t, type_, op in rows:
            f.write(json.dumps(Event(type_, op, rank, {"iteration": 1}, job=0, time=t).to_dict()) + "\n")
    return path


@pytest.mark.parametrize(
    "rank0, rank1, order",
    [
        # interleaved in time
        ([(1.0, "invoke", "save"), (3.0, "ok", "save")], [(2.0, "invoke", "save"), (4.0, "ok", "save")],
         [(0, 1.0), (1, 2.0), (0, 3.0), (1, 4.0)]),
        # equal times: rank order, then each rank's own order
        ([(1.0, "invoke", "save"), (1.0, "ok", "save")], [(1.0, "invoke", "save")],
         [(0, 1.0), (0, 1.0), (1, 1.0)]),
        # a rank written out of time order (its clock stepped back) is put in time order too
        ([(5.0, "ok", "train"), (2.0, "ok", "train")], [(3.0, "ok", "train")],
         [(0, 2.0), (1, 3.0), (0, 5.0)]),
        # a rank that wrote nothing (killed before its first event)
        ([(1.0, "ok", "train")], [], [(0, 1.0)]),
    ],
)  # fmt: skip
def test_a_jobs_ranks_merge_in_time_order(tmp_path, rank0, rank1, order):
    paths = [_rank_log(tmp_path, 0, rank0), _rank_log(tmp_path, 1, rank1)]
    events = rank_events(paths + [str(tmp_path / "missing.jsonl")], 4)
    assert [(e.process, e.time) for e in events] == order
    assert {e.job for e in events} <= {4}


@pytest.mark.parametrize("state, stamped", [(None, None), ("", None), ("state-3", "state-3")])
def test_a_crash_state_is_stamped_only_when_given(tmp_path, state, stamped):
    (e,) = rank_events([_rank_log(tmp_path, 0, [(1.0, "ok", "load")])], 1, crash_state=state)
    assert e.value.get("crash_state") == stamped


def test_a_merged_job_is_its_events_then_its_firings_then_what_was_left_open(tmp_path):
    paths = [
        _rank_log(tmp_path, 0, [(1.0, "invoke", "save"), (2.0, "ok", "save")]),
        _rank_log(tmp_path, 1, [(1.5, "invoke", "save")]),  # killed before it returned
    ]
    events = rank_events(paths, 3)
    log = EventLog(str(tmp_path / HISTORY_FILE))
    merge_job(log, events, 3, firings=[{"action": "sigkill", "rank": 1}], why="rank 1: killed")
    log.close()
    merged = case_history(str(tmp_path))
    assert [(e.process, e.type, e.f, e.job) for e in merged] == [
        (0, "invoke", "save", 3),
        (1, "invoke", "save", 3),
        (0, "ok", "save", 3),
        ("runner", "info", "fault", 3),
        (1, "info", "save", 3),
    ]
    assert merged[3].value == {"action": "sigkill", "rank": 1}
    assert merged[4].value == {"iteration": 1, "outcome": "unknown", "why": "rank 1: killed"}


@pytest.mark.parametrize(
    "rows, open_left",
    [
        ([("invoke", "save", None), ("ok", "save", None)], []),
        ([("invoke", "save", None), ("fail", "save", None)], []),
        ([("invoke", "save", None), ("info", "save", None)], []),
        ([("invoke", "save", None)], [("save", None)]),
        # an async save stays open while the next is invoked: told apart by the save id
        ([("invoke", "save", "a"), ("invoke", "save", "b"), ("ok", "save", "b")], [("save", "a")]),
        # without ids the later invoke of one operation stands for both
        ([("invoke", "load", None), ("invoke", "load", None)], [("load", None)]),
    ],
)
def test_each_invoke_left_open_becomes_info(rows, open_left):
    events = [Event(t, f, 0, {} if sid is None else {"save_id": sid}, job=1) for t, f, sid in rows]
    closed = close_open_invokes(events, "job ended")
    assert [(e.f, e.value.get("save_id")) for e in closed] == open_left
    assert all(e.type == "info" and e.value["outcome"] == "unknown" and e.job == 1 for e in closed)
