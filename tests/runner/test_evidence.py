"""runner/evidence.evidence_from, one reading per operation: what each kind of event puts into the
evidence, and what it leaves out. The checkers' own tables (tests/checkers) judge what comes out."""

import pytest

from resilience.history import Event
from resilience.runner.evidence import evidence_from
from resilience.state import Topology
from resilience.vocab.combos import Combination

T = "tp1pp1dp2"


def _ev(rows, topology=None):
    events = [
        Event(type_, f, process, value, job, time=float(i)) for i, (type_, f, process, job, value) in enumerate(rows)
    ]
    return evidence_from(
        events,
        combo=Combination.parse("GLOBAL/torch_dist/sync"),
        save_topology=Topology.parse(T),
        never_stopped=lambda it: f"fp{it}",
        topology=topology,
    )


START = ("invoke", "job", "runner", 0, {"job": 0, "topology": T, "ops": [{"op": "train"}]})


@pytest.mark.parametrize(
    "rows, field, expected",
    [
        # operations that say nothing to the checkers
        ([("ok", "train", 0, 0, {"iteration": 1}), ("info", "case", "runner", 0, {}),
          ("info", "layout", "runner", 0, {"learned": True})], "saves", []),
        # damage at rest: applied (ok), or nothing found to damage (info)
        ([("ok", "corrupt", "runner", 0, {"iteration": 2, "action": "flip"})], "corruptions",
         [{"iteration": 2, "action": "flip", "index": 0}]),
        ([("info", "corrupt", "runner", 0, {"applied": False})], "corruptions", []),
        # a firing; a torn write is also damage to the save it wrote into
        ([("info", "fault", "runner", 2, {"kind": "io_error"})], "faults_fired", [{"kind": "io_error", "job": 2}]),
        ([("invoke", "fault", "runner", 2, {"kind": "io_error"})], "faults_fired", []),
        ([("ok", "fault", "runner", 0, {"kind": "torn_write", "path": "/c/iter_0000003/a.distcp"})], "corruptions",
         [{"kind": "torn_write", "path": "/c/iter_0000003/a.distcp", "index": 0, "iteration": 3}]),
        # a finalize that raised with nothing in flight is an error of its own; one naming a save is the save's
        ([("fail", "finalize", 1, 0, {"error": "boom"})], "errors",
         [{"op": "finalize", "save_id": None, "job": 0, "rank": 1, "iteration": None, "error": "boom", "errno": None,
           "index": 0}]),
        ([("fail", "finalize", 1, 0, {"error": "boom", "iteration": 3})], "errors", []),
        # a job's end: killed ranks, and ranks blocked after another raised
        ([START, ("info", "job", "runner", 0, {"job": 0, "signals": {"1": 9}, "statuses": {"1": "signal"}})],
         "crashes", [{"job": 0, "index": 1, "signals": {"1": 9}}]),
        ([START, ("info", "job", "runner", 0, {"job": 0, "blocked": {"1": {"error": "waited"}}})], "blocked",
         [{"error": "waited", "job": 0, "rank": 1}]),
        # ranks the timeout ended, with the operations the runner closed for them
        ([START, ("info", "save", 0, 0, {"iteration": 2, "outcome": "unknown"}),
          ("info", "job", "runner", 0, {"job": 0, "timed_out": True, "seconds": 9.0,
                                        "statuses": {"0": "timeout", "1": "ok"}})], "hangs",
         [{"job": 0, "rank": 0, "ops": [{"op": "save", "iteration": 2}], "seconds": 9.0, "stacks": ""}]),
    ],
)  # fmt: skip
def test_each_operation_puts_its_part_into_the_evidence(rows, field, expected):
    assert getattr(_ev(rows), field) == expected


def test_a_save_is_acknowledged_once_every_rank_of_its_job_returned():
    rows = [START] + [("invoke", "save", r, 0, {"iteration": 2, "fingerprint": "fp2"}) for r in (0, 1)]
    (half,) = _ev(rows + [("ok", "save", 0, 0, {"iteration": 2})]).saves
    assert (half.status, half.ok_ranks, half.world, half.save_id) == ("info", [0], 2, "0.1")
    (whole,) = _ev(rows + [("ok", "save", r, 0, {"iteration": 2}) for r in (0, 1)]).saves
    assert (whole.status, whole.index, whole.fingerprint) == ("ok", 4, "fp2")
    (failed,) = _ev(rows + [("fail", "save", r, 0, {"iteration": 2, "error": "ENOSPC"}) for r in (0, 1)]).saves
    assert failed.status == "fail" and failed.errors == {0: "ENOSPC", 1: "ENOSPC"}
    # a history without job events: the world is the topology given
    (alone,) = _ev(rows[1:] + [("ok", "save", r, 0, {"iteration": 2}) for r in (0, 1)], topology="tp2pp1dp1").saves
    assert (alone.topology, alone.world, alone.status) == ("tp2pp1dp1", 2, "ok")


def test_loads_are_rank_zeros_records_with_every_ranks_outcome_and_what_training_on_gave():
    ok = {"iteration": 2, "fingerprint": "fp2", "topology": T}
    ev = _ev(
        [
            ("ok", "load", 0, 1, ok),
            ("fail", "load", 1, 1, {"error": "bad shard"}),
            ("ok", "continue", 0, 1, {"iteration": 3, "fingerprint": "fp3"}),
            ("ok", "continue", 1, 1, {"iteration": 3, "fingerprint": "x"}),  # rank 0's record only
            ("ok", "continue", 0, 2, {"iteration": 4, "fingerprint": "y"}),  # another job: not this load's
        ]
    )
    (load,) = ev.loads
    assert (load.status, load.fingerprint, load.error) == ("fail", None, "rank 1: bad shard")  # split: failed
    assert load.continued == [(3, "fp3")] and load.rank_errors == {1: "bad shard"}
    assert ev.load_splits == [{"job": 1, "ok": [0], "errors": {1: "bad shard"}}]


def test_a_recovery_knows_the_errors_it_came_after_and_how_its_job_ended():
    start = ("invoke", "job", "runner", 0, {"job": 0, "topology": T, "ops": [{"op": "save"}, {"op": "recover"}]})
    ev = _ev(
        [
            start,
            ("invoke", "save", 0, 0, {"iteration": 2}),
            ("fail", "save", 0, 0, {"iteration": 2, "error": "ENOSPC"}),
            ("invoke", "recover", 0, 0, {}),
            ("fail", "save", 0, 0, {"iteration": 3, "error": "later", "save_id": "s3", "recovery": True}),
            ("ok", "job", "runner", 0, {"job": 0, "statuses": {"0": "ok"}, "signals": {}, "timed_out": False}),
        ]
    )
    (r,) = ev.recoveries
    assert (r["job"], r["index"], r["started"]) == (0, 3, True)
    assert [e["error"] for e in r["survived"]] == ["ENOSPC"]
    assert r["ended"] == {"statuses": {"0": "ok"}, "signals": {}, "timed_out": False}
