"""The retention checker on hand-written histories and file operation logs: who destroyed the newest
acknowledged checkpoint, and when a deletion is fine. Pure logic: no processes."""

from __future__ import annotations

import pytest

from resilience.checkers import FAIL, NA, PASS, FileOp, Retention
from resilience.history import Event
from resilience.runner.evidence import evidence_from
from resilience.state import Topology
from resilience.vocab.combos import Combination

T = "tp2pp1dp1"


def saves(*spans):
    """Events of saves, each (save id, iteration, invoked at, returned at or None): both ranks alike."""
    events = [Event("invoke", "job", "runner", {"job": 0, "topology": T}, 0, 0.0)]
    for sid, it, start, end in spans:
        events += [Event("invoke", "save", r, {"save_id": sid, "iteration": it}, 0, start) for r in (0, 1)]
        if end is not None:
            events += [Event("ok", "save", r, {"save_id": sid, "iteration": it}, 0, end) for r in (0, 1)]
    return events


def op(kind, path, t, dst="", rank=0):
    return FileOp(kind, path, rank, 100 + rank, "main", t, 0, dst)


def judge(events, ops):
    ev = evidence_from(
        events, combo=Combination.parse("GLOBAL/torch_dist/sync"), save_topology=Topology.parse(T),
        never_stopped=lambda i: "",
    )  # fmt: skip
    ev.file_ops = ops
    return Retention().check(ev)


TWO = saves(("a", 1, 1.0, 2.0), ("b", 2, 3.0, 5.0))
WROTE_1 = [op("create", "staging1/model.pt", 1.5), op("rename", "staging1", 1.8, dst="iter_0000001")]
WROTE_2 = [op("create", "staging2/model.pt", 3.5)]
PUBLISH_2 = [op("rename", "staging2", 4.0, dst="iter_0000002")]

CASES = [
    # (why, ops, status)
    (
        "pruned after the next save was published",
        WROTE_1 + WROTE_2 + PUBLISH_2 + [op("rmtree", "iter_0000001", 4.5)],
        PASS,
    ),
    ("pruned after the next save was acknowledged", WROTE_1 + WROTE_2 + [op("rmtree", "iter_0000001", 6.0)], PASS),
    (
        "pruned before the next save was committed",
        WROTE_1 + WROTE_2 + [op("rmtree", "iter_0000001", 3.6)] + PUBLISH_2,
        FAIL,
    ),
    ("one file unlinked while newest", WROTE_1 + [op("unlink", "iter_0000001/model.pt", 2.5, rank=1)], FAIL),
    ("truncated in place by a re-save", WROTE_1 + [op("create", "iter_0000001/model.pt", 3.2)], FAIL),
    ("renamed over while newest", WROTE_1 + [op("rename", "junk", 2.5, dst="iter_0000001")], FAIL),
    (
        "a tracker at the root rewritten in place as the next save's last step",
        [op("create", "iter_0000001/model.pt", 1.5), op("create", "latest.txt", 1.9)]
        + [op("create", "iter_0000002/model.pt", 3.5), op("create", "latest.txt", 4.0)],
        NA,
    ),
    (
        "a file at the root rewritten in place before the next save's other files",
        [op("create", "model.pt", 1.5), op("create", "model.pt", 3.2), op("create", "optim.pt", 3.5)],
        FAIL,
    ),
    ("deleted before its own acknowledgement", WROTE_1[:1] + [op("unlink", "staging1/model.pt", 1.9)], NA),
    ("nothing deleted", WROTE_1 + WROTE_2 + PUBLISH_2, NA),
]


@pytest.mark.parametrize("why,ops,status", CASES, ids=[c[0] for c in CASES])
def test_retention_table(why, ops, status):
    assert judge(TWO, ops).status == status, why


def test_a_fail_names_the_operation_its_rank_process_thread_file_and_time():
    v = judge(TWO, WROTE_1 + [op("unlink", "iter_0000001/model.pt", 2.5, rank=1)])
    bad = v.evidence[0]
    assert (bad["op"], bad["path"], bad["rank"], bad["pid"], bad["thread"]) == (
        "unlink", "iter_0000001/model.pt", 1, 101, "main"
    )  # fmt: skip
    assert bad["time"] and "unlink iter_0000001/model.pt by rank 1 (pid 101, main thread)" in v.detail
    assert "iteration 1" in v.detail


def test_no_log_is_not_applicable_with_the_reason():
    v = judge(TWO, None)
    assert v.status == NA and "no file operation log" in v.detail


def test_a_log_that_saw_no_acknowledged_file_is_not_applicable():
    v = judge(TWO, [op("rmtree", "iter_0000001", 2.5)])
    assert v.status == NA and "saw no file" in v.detail


def test_an_exchange_that_publishes_a_resave_lets_the_old_copy_go():
    resave = saves(("a", 1, 1.0, 2.0), ("b", 1, 3.0, 5.0))
    ops = WROTE_1 + [
        op("create", "staging1b/model.pt", 3.5),
        op("exchange", "staging1b", 4.0, dst="iter_0000001"),
        op("rmtree", "staging1b", 4.1),
    ]
    assert judge(resave, ops).status == PASS


def test_a_durability_fail_names_the_operation_that_destroyed_the_lost_save():
    from resilience.checkers import Durability

    ops = WROTE_1 + WROTE_2 + PUBLISH_2 + [op("rmtree", "iter_0000002", 6.0, rank=1)]
    events = TWO + [Event("ok", "load", 0, {"iteration": 1, "topology": T}, 0, 7.0)]
    ev = evidence_from(
        events, combo=Combination.parse("GLOBAL/torch_dist/sync"), save_topology=Topology.parse(T),
        never_stopped=lambda i: "",
    )  # fmt: skip
    ev.file_ops = ops
    v = Durability().check(ev)
    [lost] = v.evidence
    assert v.status == FAIL and lost["culprits"][0]["culprit"].startswith("rmtree iter_0000002 by rank 1"), lost
    assert [(c["op"], c["path"], c["rank"]) for c in lost["culprits"]] == [("rmtree", "iter_0000002/model.pt", 1)]
    ev.file_ops = None  # no log kept: the verdict stands, without culprits
    v = Durability().check(ev)
    assert v.status == FAIL and v.evidence[0]["culprits"] == []


# a per-rank library: each rank writes its file under a temporary name and renames it into place
PER_RANK_1 = [
    op("create", "iter_0000001/rank_0.pt.tmp", 1.2),
    op("create", "iter_0000001/rank_1.pt.tmp", 1.2, rank=1),
    op("rename", "iter_0000001/rank_0.pt.tmp", 1.4, dst="iter_0000001/rank_0.pt"),
    op("rename", "iter_0000001/rank_1.pt.tmp", 1.4, dst="iter_0000001/rank_1.pt", rank=1),
]
PER_RANK_2 = [
    op("create", "iter_0000002/rank_0.pt.tmp", 3.2),
    op("create", "iter_0000002/rank_1.pt.tmp", 3.2, rank=1),
    op("rename", "iter_0000002/rank_0.pt.tmp", 3.4, dst="iter_0000002/rank_0.pt"),
]
RANK_1_PUBLISHES_2 = [op("rename", "iter_0000002/rank_1.pt.tmp", 3.8, dst="iter_0000002/rank_1.pt", rank=1)]


def test_one_ranks_rename_does_not_commit_a_save_the_other_ranks_still_write():
    early = PER_RANK_1 + PER_RANK_2 + [op("rmtree", "iter_0000001", 3.5)] + RANK_1_PUBLISHES_2
    v = judge(TWO, early)
    assert v.status == FAIL and "rmtree iter_0000001 by rank 0" in v.detail, v.detail
    after = PER_RANK_1 + PER_RANK_2 + RANK_1_PUBLISHES_2 + [op("rmtree", "iter_0000001", 3.9)]
    assert judge(TWO, after).status == PASS


def test_an_atomicity_fail_names_the_resave_that_wrote_over_the_files_the_load_read():
    from resilience.checkers import AtomicCommit

    # save a of iteration 1 is acknowledged; a re-save b of it truncates its file in place, then dies
    events = [Event("invoke", "job", "runner", {"job": 0, "topology": T}, 0, 0.0)]
    for sid, start in (("a", 1.0), ("b", 3.0)):
        events += [Event("invoke", "save", r, {"save_id": sid, "iteration": 1}, 0, start) for r in (0, 1)]
        if sid == "a":
            events += [
                Event("ok", "save", r, {"save_id": sid, "iteration": 1, "fingerprint": "A"}, 0, 2.0) for r in (0, 1)
            ]
    events.append(Event("ok", "load", 0, {"iteration": 1, "topology": T, "fingerprint": "MIXED"}, 0, 7.0))
    ev = evidence_from(
        events, combo=Combination.parse("GLOBAL/torch_dist/sync"), save_topology=Topology.parse(T),
        never_stopped=lambda i: "",
    )  # fmt: skip
    ev.file_ops = WROTE_1 + [op("create", "iter_0000001/model.pt", 3.5, rank=1)]
    v = AtomicCommit().check(ev)
    assert v.status == FAIL, v
    [c] = v.evidence[0]["culprits"]
    assert (c["op"], c["path"], c["rank"], c["save_id"]) == ("create", "iter_0000001/model.pt", 1, "a"), c
    assert "first culprit: create iter_0000001/model.pt by rank 1" in v.detail, v.detail


def test_a_resave_of_the_same_iteration_rewriting_the_tracker_as_its_last_step_commits_it():
    resave = saves(("a", 1, 1.0, 2.0), ("b", 1, 3.0, 5.0))
    tracker = [op("create", "latest.txt", 1.9), op("create", "staging1b/model.pt", 3.5)]
    ops = WROTE_1[:1] + tracker + [op("create", "latest.txt", 4.5)]  # b's last step: the pointer
    v = judge(resave, ops)  # the old tracker is replaced by the re-save's commit: nothing of it destroyed
    assert v.status == NA and v.detail == "no file of an acknowledged checkpoint was deleted, truncated or replaced", v


# rankckpt's order: each rank's file renamed into place, then rank 0's manifest (the commit), then `latest`
MANIFEST_2 = [
    op("create", "iter_0000002/manifest.json.tmp", 3.85),
    op("rename", "iter_0000002/manifest.json.tmp", 3.9, dst="iter_0000002/manifest.json"),
]


def test_a_save_is_committed_by_its_last_publishing_rename_not_by_the_data_files_renames():
    early = PER_RANK_1 + PER_RANK_2 + RANK_1_PUBLISHES_2 + [op("rmtree", "iter_0000001", 3.85)] + MANIFEST_2
    v = judge(TWO, early)  # every data file is in place, but the manifest that commits them is not
    assert v.status == FAIL and "rmtree iter_0000001 by rank 0" in v.detail, v.detail
    after = PER_RANK_1 + PER_RANK_2 + RANK_1_PUBLISHES_2 + MANIFEST_2 + [op("rmtree", "iter_0000001", 3.95)]
    assert judge(TWO, after).status == PASS


def test_a_rank_folders_tracker_renamed_over_as_the_next_saves_last_step_is_its_commit():
    def tracker(t, rank):
        name = f"rank_{rank}/latest_checkpointed_iteration.txt"
        return [op("create", name + ".tmp", t, rank=rank), op("rename", name + ".tmp", t + 0.05, dst=name, rank=rank)]

    ops = []
    for it, (t0, t1) in ((1, (1.2, 1.5)), (2, (3.2, 3.5))):
        for r in (0, 1):
            ops += [op("create", f"rank_{r}/iter_{it}/model.pt", t0, rank=r)] + tracker(t1 + r * 0.3, r)
    v = judge(TWO, sorted(ops, key=lambda o: o.time))  # rank 1 replaces its tracker before rank 0 publishes
    assert v.status == NA, v
    ops.append(op("create", "rank_0/iter_1/model.pt", 3.3))  # ... but a data file truncated in place is a loss
    assert judge(TWO, sorted(ops, key=lambda o: o.time)).status == FAIL


def test_a_resave_committed_by_renaming_its_manifest_over_the_old_one_replaces_nothing_it_owed():
    resave = saves(("a", 1, 1.0, 2.0), ("b", 1, 3.0, 5.0))
    manifest = "iter_0000001/manifest.json"

    def save(t, tag):  # rankckpt: data file, manifest (the commit), then the root pointer `latest`
        return [
            op("create", f"iter_0000001/rank_0.{tag}.pt.tmp", t),
            op("rename", f"iter_0000001/rank_0.{tag}.pt.tmp", t + 0.1, dst=f"iter_0000001/rank_0.{tag}.pt"),
            op("create", manifest + ".tmp", t + 0.2),
            op("rename", manifest + ".tmp", t + 0.3, dst=manifest),
            op("create", "latest.tmp", t + 0.4),
            op("rename", "latest.tmp", t + 0.5, dst="latest"),
        ]

    v = judge(resave, save(1.1, "a") + save(3.1, "b"))
    assert v.status == PASS, v


def test_an_async_resave_that_overwrites_the_save_it_waited_for_is_caught():
    """Async saves overlap: save b (a re-save of step 3) is invoked while a's writer still creates a's
    file, waits for a (a acknowledged at 2.5), then truncates that file in place. The file is a's, so the
    truncation destroys the newest acknowledged checkpoint."""
    events = saves(("a", 3, 1.0, 2.5), ("b", 3, 2.0, 4.0))
    ops = [op("create", "step-3/__0_0.distcp", 2.2), op("create", "step-3/__0_0.distcp", 3.0)]
    v = judge(events, ops)
    assert v.status == FAIL and "of iteration 3 (save a)" in v.detail, v.detail


def test_a_save_that_never_returned_owns_nothing_after_the_next_one_began():
    events = saves(("a", 1, 1.0, None), ("b", 2, 2.0, 3.0), ("c", 3, 4.0, 5.0))
    ops = [op("create", "iter_0000002/model.pt", 2.5), op("create", "iter_0000002/model.pt", 4.5)]
    v = judge(events, ops)  # b's file, acknowledged at 3.0, truncated by c before c returned
    assert v.status == FAIL and "(save b)" in v.detail, v.detail
