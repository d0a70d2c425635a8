"""The judge of a cluster run on hand-made evidence: what passes, and that each way of failing is caught."""

import json

import pytest

from resilience.cluster import ClusterPlan, SharedFolder
from resilience.cluster.spec import write_json
from resilience.cluster.verdicts import combination_row, finish
from resilience.faults import FaultReport
from resilience.history import EventLog
from resilience.runner.oracle import NeverStopped
from resilience.state import ModelSpec, Topology

SPEC = ModelSpec(num_layers=2, hidden=8, heads=2, ffn_hidden=16, vocab=20, optimizer="distributed")
TOPO = Topology(2, 1, 2)
EXPECTED = NeverStopped(SPEC)


def _run(
    tmp_path, combo="GLOBAL/torch_dist/sync", *, loaded=3, load_fp=None, continued_fp=None, kill=True, acked_by=None
):
    """The evidence a run leaves: saves 2 and 3 acknowledged, 4 cut by rank 3's kill on attempt 0, a resume on
    attempt 1 that loaded `loaded`."""
    plan = ClusterPlan(combos=(combo,), model=SPEC.to_dict())
    shared_folder = SharedFolder(str(tmp_path / "shared"))
    shared_folder.create()
    write_json(
        shared_folder.plan,
        {"plan": plan.to_dict(), "run_id": "r", "world": 4, "topology": TOPO.to_dict(), "command": "torchrun ..."},
    )
    write_json(
        shared_folder.state(combo),
        {"save_started": 0, "kill_armed": kill, "resume_started": 1, **({} if kill else {"save_done": 0})},
    )
    logs = {r: EventLog(shared_folder.history(r), 0, r) for r in range(4)}
    for it in (2, 3, 4):
        logs[0].invoke("save", combo=combo, iteration=it, fingerprint=EXPECTED(it), rng=f"rng{it}")
        if it < 4 or not kill:
            for r in acked_by if acked_by is not None else range(4):
                logs[r].ok("save", combo=combo, iteration=it)
    for r in range(4):
        logs[r].close()
    if kill:
        FaultReport(shared_folder.faults(combo, 3)).append(
            {"kind": "rank_crash", "action": "sigkill", "rank": 3, "phase": "write"}
        )
    log = EventLog(shared_folder.history(0), 1, 0)
    log.ok(
        "load",
        combo=combo,
        topology=str(TOPO),
        iteration=loaded,
        fingerprint=load_fp or EXPECTED(loaded),
        rng=f"rng{loaded}",
        rng_restored=True,
        path=f"iter_{loaded:07d}",
        warnings=[],
    )
    log.ok("continue", combo=combo, iteration=loaded + 2, fingerprint=continued_fp or EXPECTED(loaded + 2))
    log.invoke("save", combo=combo, iteration=loaded + 2, fingerprint=EXPECTED(loaded + 2), rng="x")
    log.ok("save", combo=combo, iteration=loaded + 2)
    log.close()
    return plan, shared_folder


def _statuses(row):
    return {v.checker: v.status for v in row.checkers}


def test_a_correct_resume_passes_every_check(tmp_path):
    plan, shared_folder = _run(tmp_path)
    row = combination_row(plan, shared_folder, plan.combinations[0], TOPO, 1, newest=3, after=5, seconds=1.0)
    assert row.verdict == "PASS", row
    assert set(_statuses(row).values()) == {"PASS"}
    assert "cut by the kill at write" in row.detail and "resumed iteration 3" in row.detail
    assert row.replay == "torchrun ..."


@pytest.mark.parametrize(
    "change, checker",
    [
        ({"load_fp": "0" * 32}, "resume_equivalence"),  # wrong values loaded
        ({"continued_fp": "1" * 32}, "resume_equivalence"),  # training on diverged
        ({"loaded": 2}, "durability"),  # an acknowledged save lost
    ],
)
def test_each_wrong_resume_fails(tmp_path, change, checker):
    plan, shared_folder = _run(tmp_path, **change)
    newest = change.get("loaded", 3)
    row = combination_row(
        plan, shared_folder, plan.combinations[0], TOPO, 1, newest=newest, after=newest + 2, seconds=1.0
    )
    assert row.verdict == "FAIL" and _statuses(row)[checker] == "FAIL", row


def test_not_the_newest_valid_checkpoint_fails(tmp_path):
    plan, shared_folder = _run(tmp_path)
    row = combination_row(plan, shared_folder, plan.combinations[0], TOPO, 1, newest=4, after=5, seconds=1.0)
    assert _statuses(row)["newest_valid"] == "FAIL"
    assert "newest valid checkpoint on disk is iteration 4" in row.detail
    row = combination_row(plan, shared_folder, plan.combinations[0], TOPO, 1, newest=3, after=3, seconds=1.0)
    assert _statuses(row)["newest_valid"] == "FAIL"


def test_a_kill_that_never_fired_is_unprobed_and_a_resume_in_the_same_attempt_fails(tmp_path):
    plan, shared_folder = _run(tmp_path)
    row = combination_row(plan, shared_folder, plan.combinations[0], TOPO, 0, newest=3, after=5, seconds=1.0)
    assert _statuses(row)["kill_and_restart"] == "FAIL"
    plan, shared_folder = _run(tmp_path / "b", kill=False, loaded=4)
    write_json(shared_folder.state(plan.combinations[0]), {"save_started": 0, "save_done": 0, "kill_armed": True})
    row = combination_row(plan, shared_folder, plan.combinations[0], TOPO, 1, newest=4, after=6, seconds=1.0)
    assert row.verdict == "UNPROBED" and "never fired" in row.detail


@pytest.mark.parametrize("combo", ["LOCAL/torch/sync", "GLOBAL/torch_dist/sync"])
def test_a_save_counts_only_once_every_rank_returned(tmp_path, combo):
    # rank 3 never returned from any save: none is acknowledged, so loading 2 loses nothing
    plan, shared_folder = _run(tmp_path, combo, loaded=2, acked_by=[0, 1, 2])
    row = combination_row(plan, shared_folder, plan.combinations[0], TOPO, 1, newest=2, after=4, seconds=1.0)
    assert _statuses(row)["durability"] == "N/A" and _statuses(row)["saves"] == "UNPROBED", row
    # every rank returned: iteration 3 is owed
    plan, shared_folder = _run(tmp_path / "all", combo, loaded=2)
    row = combination_row(plan, shared_folder, plan.combinations[0], TOPO, 1, newest=2, after=4, seconds=1.0)
    assert _statuses(row)["durability"] == "FAIL", row


def test_summary_and_exit_status(tmp_path, capsys):
    plan, shared_folder = _run(tmp_path)
    assert finish(plan, shared_folder, 1) == 1  # no result yet
    combo = plan.combinations[0]
    write_json(shared_folder.result(combo), combination_row(plan, shared_folder, combo, TOPO, 1, 3, 5, 1.0).to_dict())
    assert finish(plan, shared_folder, 1) == 0
    summary = json.loads(open(shared_folder.summary).read())
    assert summary["ok"] and summary["attempts"] == 2 and summary["results"][0]["verdict"] == "PASS"
    for name in ("results.json", "report.md", "junit.xml"):
        assert (tmp_path / "shared" / "report" / name).is_file()
    assert "1 passed, 0 not passed; report: " in capsys.readouterr().out
