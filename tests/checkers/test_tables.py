"""Hand-written histories and the verdict each must give: history -> evidence (the one builder the runner
and the cluster verdicts use) -> checkers -> the case's verdict. Pure logic: no processes."""

from __future__ import annotations

import pytest

from resilience.checkers import ALL, FAIL, FAILING, NA, PASS, REFUSED, UNKNOWN, UNPROBED, Verdict, run_checker
from resilience.checkers.case import FIRED, NEVER_FIRED, case_verdict as combine
from resilience.checkers.integrity import INERT
from resilience.checkers.topology import TopologyIndependence
from resilience.history import Event
from resilience.report.matrix_table import cell_of, text_table
from resilience.report.result_row import ResultRow
from resilience.runner.evidence import evidence_from
from resilience.state import Topology
from resilience.vocab.combos import Combination
from resilience.vocab.contract import TopologyContract

T = "tp2pp1dp1"  # two ranks


def fp(i):
    return f"fp{i}"


class History:
    """Events as the runner merges them: job markers, each rank's operations, fault firings."""

    def __init__(self):
        self.events: list[Event] = []
        self.job = 0

    def add(self, type_, f, process, **value):
        self.events.append(Event(type_, f, process, value, self.job))
        return self

    def start(self, job, topology=T, ops=None):
        self.job = job
        return self.add("invoke", "job", "runner", job=job, topology=topology, **({"ops": ops} if ops else {}))

    def end(self, job, signals=None):
        statuses = {r: "signal" if r in (signals or {}) else "ok" for r in (0, 1)}
        return self.add("info", "job", "runner", job=job, statuses=statuses, signals=signals or {}, timed_out=False)

    def save(self, sid, it, ok=(0, 1), fail=None, errno=None, invoke=(0, 1), **tags):
        for r in invoke:
            fingerprint = {"fingerprint": fp(it)} if r == 0 else {}
            self.add("invoke", "save", r, save_id=sid, iteration=it, **fingerprint, **tags)
        for r in ok:
            self.add("ok", "save", r, save_id=sid, iteration=it, **tags)
        for r, error in (fail or {}).items():
            errno_ = {"errno": errno} if errno else {}
            self.add("fail", "save", r, save_id=sid, iteration=it, error=error, **errno_, **tags)
        return self

    def recover(self):
        for r in (0, 1):
            self.add("invoke", "recover", r)
        return self

    def fault(self, kind="io_error", rank=1):
        return self.add("info", "fault", "runner", kind=kind, rank=rank)

    def timed_out(self, job, f="finalize", iteration=3, stacks=""):
        """Both ranks still inside `f` when the job's timeout ended it (the runner closes the open invokes)."""
        for r in (0, 1):
            self.add("invoke", f, r, iteration=iteration)
        for r in (0, 1):
            self.add("info", f, r, iteration=iteration, outcome="unknown", why="rank 0: still running")
        hung = {"hung": {0: {"stacks": stacks}}} if stacks else {}
        statuses = {0: "timeout", 1: "timeout"}
        return self.add(
            "info", "job", "runner", job=job, statuses=statuses, signals={}, timed_out=True, seconds=120.0, **hung
        )

    def load(self, it=None, ok=True, topology=T, refused=False, crash_state=None, error="", **tags):
        if ok:
            return self.add(
                "ok", "load", 0, iteration=it, fingerprint=fp(it), topology=topology, crash_state=crash_state, **tags
            )
        return self.add(
            "fail", "load", 0, topology=topology, refused=refused, error=error, crash_state=crash_state, **tags
        )


def judge(h: History, combo="GLOBAL/torch_dist/sync", save_topology=T) -> dict:
    ev = evidence_from(
        h.events, combo=Combination.parse(combo), save_topology=Topology.parse(save_topology), never_stopped=fp
    )
    return {v.checker: v for v in (run_checker(c, ev) for c in ALL)}


ENOSPC = "OSError: [Errno 28] No space left on device"
RECOVER_OPS = [{"op": "train"}, {"op": "save"}, {"op": "save"}, {"op": "recover"}]


def _recovered() -> History:
    """A job whose second save raised ENOSPC on both ranks, then recovered: the first load finds iteration 2."""
    h = History().start(0, ops=RECOVER_OPS).save("0.1", 2).fault()
    h.save("0.2", 3, ok=(), fail={0: "RankFailure: failures={1}", 1: ENOSPC}, errno="ENOSPC")
    return h.recover().load(2, recovery="fault")


GLOO_TIMEOUT = "RuntimeError: [../third_party/gloo/gloo/transport/tcp/pair.cc:534] Read error: Timed out after 30000ms"

# (name, history, checker, verdict it must give, words its detail must hold)
TABLE = [
    (
        "clean: two saves, the newest loaded",
        History().start(0).save("0.1", 2).save("0.2", 3).start(1).load(3),
        "durability",
        PASS,
        "",
    ),
    (
        "partial acknowledgement: rank 1 never returned from save 3, so 2 may be loaded",
        History().start(0).save("0.1", 2).save("0.2", 3, ok=(0,)).start(1).load(2),
        "durability",
        PASS,
        "",
    ),
    (
        "partial acknowledgement is indeterminate, not a failure of the save",
        History().start(0).save("0.1", 2).save("0.2", 3, ok=(0,)).start(1).load(2),
        "saves",
        PASS,
        "1 indeterminate",
    ),
    (
        "both ranks returned save 3: loading 2 loses it",
        History().start(0).save("0.1", 2).save("0.2", 3).start(1).load(2),
        "durability",
        FAIL,
        "acknowledged save",
    ),
    (
        "a failed re-save of an acknowledged iteration keeps its acknowledgement: a failed load loses it",
        History()
        .start(0)
        .save("0.1", 2)
        .fault()
        .save("0.2", 2, ok=(0,), fail={1: "OSError: EIO"}, errno="EIO")
        .start(1)
        .load(ok=False, error="CheckpointNotFound: none"),
        "durability",
        FAIL,
        "lost an acknowledged",
    ),
    (
        "a failed re-save of an acknowledged iteration, the first copy loaded",
        History()
        .start(0)
        .save("0.1", 2)
        .fault()
        .save("0.2", 2, ok=(0,), fail={1: "OSError: EIO"}, errno="EIO")
        .start(1)
        .load(2),
        "durability",
        PASS,
        "",
    ),
    (
        "a load that returned an older iteration after an acknowledged save",
        History().start(0).save("0.1", 2).start(1).save("1.1", 4).start(2).load(2),
        "durability",
        FAIL,
        "lost",
    ),
    (
        "ENOSPC on every save, no fault planned: the environment refused, named by errno",
        History()
        .start(0)
        .save("0.1", 2, ok=(0,), fail={1: ENOSPC}, errno="ENOSPC")
        .start(1)
        .load(ok=False, error="CheckpointNotFound: none"),
        "saves",
        UNKNOWN,
        "save raised OSError ENOSPC: No space left on device on rank 1",
    ),
    (
        "ENOSPC on every save, as a planned io_error makes it: nothing acknowledged, nothing probed",
        History()
        .start(0)
        .fault()
        .save("0.1", 2, ok=(0,), fail={1: ENOSPC}, errno="ENOSPC")
        .start(1)
        .load(ok=False, error="CheckpointNotFound: none"),
        "saves",
        UNPROBED,
        "none of 1 saves",
    ),
    (
        "every failing rank timed out in gloo's collective, nothing else raised: too slow to judge",
        History()
        .start(0)
        .save("0.1", 2)
        .save("0.2", 3, ok=(), fail={0: GLOO_TIMEOUT, 1: GLOO_TIMEOUT})
        .start(1)
        .load(2),
        "saves",
        UNKNOWN,
        "timed out in a collective",
    ),
    (
        "one rank raised a bug, the other timed out waiting for it: the code's failure",
        History()
        .start(0)
        .save("0.1", 2)
        .save("0.2", 3, ok=(), fail={0: GLOO_TIMEOUT, 1: "ValueError: bad"})
        .start(1)
        .load(2),
        "saves",
        FAIL,
        "ValueError: bad",
    ),
    (
        "a save that raised a bug on every rank",
        History()
        .start(0)
        .save("0.1", 2, ok=(), fail={0: "ValueError: bad", 1: "ValueError: bad"})
        .start(1)
        .load(ok=False, error="CheckpointNotFound: none"),
        "saves",
        FAIL,
        "save raised ValueError: bad on rank 0",
    ),
    (
        "a power-loss state that kept the acknowledged save",
        History().start(0).save("0.1", 2).save("0.2", 3, ok=()).start(1).load(2, crash_state="state-000"),
        "durability",
        PASS,
        "1 power-loss states",
    ),
    (
        "a power-loss state that lost the acknowledged save",
        History()
        .start(0)
        .save("0.1", 2)
        .save("0.2", 3, ok=())
        .start(1)
        .load(ok=False, crash_state="state-001", error="CheckpointNotFound: empty"),
        "durability",
        FAIL,
        "",
    ),
    (
        "a power-loss state holding a state no save wrote",
        History()
        .start(0)
        .save("0.1", 2)
        .start(1)
        .add("ok", "load", 0, iteration=2, fingerprint="torn", crash_state="state-002"),
        "atomic_commit",
        FAIL,
        "no save",
    ),
    (
        "a save that failed on every rank, then loaded: it took effect although it said it failed",
        History()
        .start(0)
        .save("0.1", 2)
        .fault()
        .save("0.2", 3, ok=(), fail={0: "RankFailure: nothing committed", 1: "RankFailure: nothing committed"})
        .start(1)
        .load(3),
        "atomic_commit",
        FAIL,
        "a save reported failed took effect",
    ),
    (
        "a save that failed on every rank, then the older one loaded: nothing of it took effect",
        History()
        .start(0)
        .save("0.1", 2)
        .fault()
        .save("0.2", 3, ok=(), fail={0: "RankFailure: nothing committed", 1: "RankFailure: nothing committed"})
        .start(1)
        .load(2),
        "atomic_commit",
        PASS,
        "",
    ),
    # recovery: after a save that raised, the same job loads, saves and loads back (runner/rankprog.Recovery)
    (
        "recovery: the same job saved and loaded back after a failed save",
        _recovered().save("0.3", 4, recovery=True).load(4, recovery="save").end(0),
        "recovery",
        PASS,
        "saved iteration 4 (save 0.3) and loaded it back equal",
    ),
    (
        "recovery: every save after the failed one raises",
        _recovered()
        .save("0.3", 4, ok=(), fail={0: "RuntimeError: busy", 1: "RuntimeError: busy"}, recovery=True)
        .load(2, recovery="save")
        .end(0),
        "recovery",
        FAIL,
        "the next save 0.3 (iteration 4) raised on ranks [0, 1]",
    ),
    (
        "recovery: the save after the fault never returned on rank 1",
        _recovered().save("0.3", 4, ok=(0,), recovery=True).end(0),
        "recovery",
        FAIL,
        "never returned on ranks [1]",
    ),
    (
        "recovery: acknowledged, but the load in the same job gives the older checkpoint",
        _recovered().save("0.3", 4, recovery=True).load(2, recovery="save").end(0),
        "recovery",
        FAIL,
        "gave iteration 2",
    ),
    (
        "recovery: a rank killed is no fault survived",
        History()
        .start(0, ops=RECOVER_OPS)
        .save("0.1", 2)
        .save("0.2", 3, ok=(), fail={0: "RuntimeError: gloo connection reset"})
        .end(0, signals={1: 9}),
        "recovery",
        NA,
        "killed",
    ),
    (
        "recovery: nothing raised before it",
        History().start(0, ops=RECOVER_OPS).save("0.1", 2).recover().save("0.2", 3, recovery=True).end(0),
        "recovery",
        NA,
        "nothing raised before the recovery",
    ),
    ("recovery: no recover step", History().start(0).save("0.1", 2), "recovery", NA, "no recover step"),
    # hang: after a fault the ranks lived through, every rank comes back from its operation (checkers/liveness)
    (
        "hang: after a writer kill both ranks wait in finalize until the job's timeout",
        History()
        .start(0)
        .save("0.1", 2)
        .fault("writer_kill")
        .save("0.2", 3)
        .timed_out(0, stacks='Thread 0x1 (most recent call first):\n  File "/x/threading.py", line 1119 in join\n'),
        "hang",
        FAIL,
        "hang: after writer_kill in job 0, rank 0 never came back from finalize of iteration 3, waiting in join "
        "(threading.py:1119); still running when the job was ended after 120.0 s (and ranks [1])",
    ),
    (
        "hang: a writer kill and the job ended",
        History().start(0).save("0.1", 2).fault("writer_kill").save("0.2", 3, ok=(), fail={0: "x", 1: "y"}).end(0),
        "hang",
        PASS,
        "every job a fault fired in ended on its own",
    ),
    (
        "hang: a rank was killed, its peer's wait is expected",
        History().start(0).save("0.1", 2).fault("rank_kill").save("0.2", 3, ok=()).end(0, signals={1: 9}),
        "hang",
        NA,
        "no fault fired in a job whose ranks all lived on",
    ),
    (
        "hang: a rank stopped for good, its peers' wait is expected",
        History().start(0).save("0.1", 2).fault("rank_hang").timed_out(0),
        "hang",
        NA,
        "no fault fired in a job whose ranks all lived on",
    ),
    ("hang: a timeout with no fault is not judged here", History().start(0).timed_out(0), "hang", NA, "no fault"),
    (
        "hang: after a writer kill rank 1 stays blocked while rank 0 raised",
        History()
        .start(0)
        .fault("writer_kill")
        .save("0.1", 2, ok=(), fail={0: GLOO_TIMEOUT}, invoke=(0,))
        .add(
            "info",
            "job",
            "runner",
            job=0,
            statuses={0: "error", 1: "blocked"},
            signals={},
            timed_out=False,
            blocked={1: {"error": "still running", "stacks": "", "after": {"rank": 0, "error": GLOO_TIMEOUT}}},
        ),
        "hang",
        FAIL,
        "rank 1 stayed blocked in an unknown place after rank 0 raised; the job was torn down",
    ),
]


@pytest.mark.parametrize("name, history, checker, status, words", TABLE, ids=[row[0] for row in TABLE])
def test_each_history_gets_its_verdict(name, history, checker, status, words):
    v = judge(history)[checker]
    assert v.status == status, (name, v)
    assert words in v.detail, (name, v.detail)


@pytest.mark.parametrize("combo, status", [("LEGACY/torch/sync", REFUSED), ("GLOBAL/torch_dist/sync", FAIL)])
def test_a_refused_load_is_right_where_the_combination_refuses(combo, status):
    h = (
        History()
        .start(0)
        .save("0.1", 2)
        .start(1, "tp1pp1dp1")
        .load(ok=False, topology="tp1pp1dp1", refused=True, error="TopologyChangeRefused: tp 2 -> 1")
    )
    assert judge(h, combo)["topology_independence"].status == status


def test_an_async_save_is_acknowledged_only_when_finalize_returned_on_every_rank():
    h = History().start(0)
    for r in (0, 1):
        h.add("invoke", "save", r, save_id="0.1", iteration=2, **({"fingerprint": fp(2)} if r == 0 else {}))
    for r in (0, 1):
        h.add("ok", "stage", r, save_id="0.1", iteration=2)
    h.add("ok", "save", 0, save_id="0.1", iteration=2, via="finalize")  # rank 1 died in finalize
    h.start(1).load(ok=False, error="CheckpointNotFound: none")
    assert judge(h, "GLOBAL/torch_dist/async")["durability"].status == NA
    h.events.insert(-2, Event("ok", "save", 1, {"save_id": "0.1", "iteration": 2, "via": "finalize"}, 0))
    assert judge(h, "GLOBAL/torch_dist/async")["durability"].status == FAIL


def _early(combo, ok_before_write=True):
    """Rank 0 returns from save 0.2 before or after a crash catches rank 1 still writing it."""
    h = History().start(0).save("0.1", 2)
    h.save("0.2", 3, ok=())
    crash = {"kind": "rank_crash", "rank": 1, "op": "write", "path": "iter_0000003/mp_rank_01/x.pt"}
    if ok_before_write:
        h.add("ok", "save", 0, save_id="0.2", iteration=3)
        h.add("info", "fault", "runner", **crash, time=h.events[-1].time + 0.1)
    else:
        h.add("info", "fault", "runner", **crash, time=h.events[-1].time - 0.1)
        h.add("ok", "save", 0, save_id="0.2", iteration=3)
    return judge(h.start(1).load(2), combo)["durability"]


def test_a_rank_may_not_report_a_save_done_before_every_rank_wrote_its_part():
    v = _early("LEGACY/torch/sync")
    assert v.status == FAIL and "rank 0 reported save 0.2 (iteration 3) done" in v.detail, v
    assert _early("LEGACY/torch/sync", ok_before_write=False).status == PASS  # returned after: indeterminate only
    assert _early("LOCAL/torch/sync").status == PASS  # each LOCAL rank speaks for its own folder


def test_an_error_in_a_job_where_a_rank_was_killed_is_explained():
    h = History().start(0).save("0.1", 2).save("0.2", 3, ok=(), fail={0: "RuntimeError: gloo connection reset"})
    h.add("info", "job", "runner", job=0, signals={1: 9}).start(1).load(2)
    assert judge(h)["saves"].status == PASS


def test_histories_without_save_ids_pair_each_answer_with_its_save():
    # the cluster program's form: every rank invokes, only rank 0 carries the fingerprint, no save id
    h = History().start(0)
    for it in (2, 2, 3):
        for r in (0, 1):
            h.add("invoke", "save", r, iteration=it, **({"fingerprint": fp(it)} if r == 0 else {}))
        for r in (0, 1) if it != 3 else (0,):
            h.add("ok", "save", r, iteration=it)
    ev = evidence_from(
        h.start(1).load(2).events,
        combo=Combination.parse("GLOBAL/torch_dist/sync"),
        save_topology=Topology.parse(T),
        never_stopped=fp,
    )
    assert [(s.save_id, s.iteration, s.status) for s in ev.saves] == [
        ("0.1", 2, "ok"),
        ("0.2", 2, "ok"),
        ("0.3", 3, "info"),
    ]


def test_an_unfired_fault_beside_a_fail_shows_both():
    verdicts = [Verdict("durability", FAIL, "1 of 1 loads lost an acknowledged save")]
    faults = [
        {"fault": "rank_crash rank=1 phase=write", "status": NEVER_FIRED, "detail": "its trigger never came"},
        {"fault": "truncate", "status": FIRED, "detail": "damaged iter_0000002/x"},
    ]
    overall, detail, extra = combine(verdicts, [], faults)
    assert overall == FAIL
    assert [(v.checker, v.status) for v in extra] == [("faults", UNPROBED)]
    assert "durability:" in detail and "also UNPROBED" in detail and "rank_crash" in detail
    row = {"combo": "GLOBAL/torch_dist/sync", "column": "kill", "verdict": overall.value, "faults": faults}
    typed = ResultRow.from_dict(row)
    assert cell_of(typed) == "FAIL+UNPROBED" and "FAIL+UNPROBED" in text_table([typed])
    # nothing unfired: the cell is the verdict alone
    assert cell_of(ResultRow.from_dict(dict(row, faults=faults[1:]))) == "FAIL"


def test_an_unfired_fault_alone_is_unprobed_never_a_pass():
    overall, _, _ = combine(
        [Verdict("durability", PASS, "ok")],
        [],
        [{"fault": "x", "status": "not applicable", "detail": "nothing to damage"}],
    )
    assert overall == UNPROBED and overall in FAILING


def test_a_rank_that_failed_unexpectedly_is_unknown_beside_a_pass():
    overall, detail, _ = combine([Verdict("durability", PASS, "ok")], [{"error": "rank 1: SIGSTOP, timed out"}], [])
    assert overall == UNKNOWN and "a rank failed unexpectedly" in detail


def test_damage_that_changed_nothing_loaded_makes_the_case_na_never_pass():
    inert = Verdict("integrity", NA, f"{INERT} (1 loads read the damaged iteration without a warning ...)")
    faults = [{"fault": "bit_flip rank=0 seed=2", "status": FIRED, "detail": "damaged iter_0000001/x.pt"}]
    overall, detail, extra = combine([Verdict("atomic_commit", PASS, "ok"), inert], [], faults)
    assert overall == NA and "probed nothing" in detail
    # the same damage detected by the loader is a real PASS
    overall, _, _ = combine([Verdict("atomic_commit", PASS, "ok"), Verdict("integrity", PASS, "detected")], [], faults)
    assert overall == PASS


@pytest.mark.parametrize(
    "contract, status",
    [
        ({"tp": "refuse"}, REFUSED),
        ({"tp": "load"}, FAIL),
        ({"dp": "load"}, REFUSED),
        ({"tp": "load", "dp": "refuse"}, FAIL),
    ],
)
def test_a_stated_contract_decides_over_the_combination(contract, status):
    # the same refusal of a tp change under GLOBAL (whose preset promises a load): the contract decides
    h = (
        History()
        .start(0)
        .save("0.1", 2)
        .start(1, "tp1pp1dp1")
        .load(ok=False, topology="tp1pp1dp1", refused=True, error="TopologyChangeRefused: tp 2 -> 1")
    )
    ev = evidence_from(
        h.events,
        combo=Combination.parse("GLOBAL/torch_dist/sync"),
        save_topology=Topology.parse(T),
        never_stopped=fp,
        contract=TopologyContract.parse(contract, source="stated by test"),
    )
    v = run_checker(TopologyIndependence(), ev)
    assert v.status == status, v
    if status == FAIL:
        assert "stated by test" in v.detail


def test_a_loaded_change_the_contract_refuses_fails():
    h = History().start(0).save("0.1", 2).start(1, "tp1pp1dp1").load(2, topology="tp1pp1dp1")
    ev = evidence_from(
        h.events,
        combo=Combination.parse("GLOBAL/torch_dist/sync"),
        save_topology=Topology.parse(T),
        never_stopped=fp,
        contract=TopologyContract.parse({"tp": "refuse"}),
    )
    assert run_checker(TopologyIndependence(), ev).status == FAIL
    ev.contract = None  # the preset of GLOBAL loads any change
    assert run_checker(TopologyIndependence(), ev).status == PASS
