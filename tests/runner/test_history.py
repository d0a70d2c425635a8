import os

from resilience.runner.history import EventLog, close_open_invokes, read_events


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
