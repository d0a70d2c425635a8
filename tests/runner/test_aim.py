"""Faults aimed through a learned layout: pure planning, no processes."""

from resilience.faults import Fault
from resilience.faults.layout import Layout, LayoutFile
from resilience.runner.aiming import OUTSIDE_SEAM, aim
from resilience.runner.matrix import fault_scenario
from resilience.runner.plan import PowerLoss, plan_jobs
from resilience.vocab.combos import Combination

DCP = Layout(
    13,
    (
        LayoutFile("step-{iteration}/__0_0.distcp", "data", 0, "step-{iteration}/__0_0.distcp"),
        LayoutFile("step-{iteration}/__1_0.distcp", "data", 1, "step-{iteration}/__1_0.distcp"),
        LayoutFile("step-{iteration}/.metadata", "metadata", 0, "step-{iteration}/.metadata.tmp"),
    ),
    True,
    "oplog",
    {
        "write": {"op": "create", "path": "step-13/__0_0.distcp", "rank": 0},
        "commit_rename": {"op": "rename", "path": "step-13/.metadata.tmp", "rank": 0},
    },
)
SCAN = Layout(13, (LayoutFile("iter_{iteration}/rank_0.pt", "data"),), False, "scan")
COMBO = Combination.parse("TORCH_DCP/torch_dcp/sync")


def _faults(scenario, layout):
    jobs = plan_jobs(scenario, COMBO, layout)
    return [f.fault for j in jobs for f in j.faults], [u for j in jobs for u in j.unreachable], jobs


def _aim(record: dict, layout, iteration):
    return aim(Fault.from_dict(record), layout, iteration)


def test_matrix_crashes_land_in_a_data_file_of_the_second_save():
    faults, unreachable, _ = _faults(fault_scenario("kill", 0), DCP)
    assert not unreachable
    assert [(f.kind, f.target.path) for f in faults] == [
        ("slow_write", "*/step-3/__1_0.distcp"),
        ("rank_crash", "*/step-3/__1_0.distcp"),
    ]


def test_power_loss_is_armed_before_both_saves_and_cuts_inside_the_second():
    faults, _, jobs = _faults(fault_scenario("lost_unsynced", 0), DCP)
    [loss] = faults
    assert loss.target.path == "*/step-3/__1_0.distcp" and loss.trigger.at_byte == 200
    assert jobs[0].after == [PowerLoss(loss)] and jobs[0].after[0].fault is loss


def test_in_process_faults_on_a_backend_outside_the_seam_are_set_aside_with_one_reason():
    faults, unreachable, jobs = _faults(fault_scenario("lost_unsynced", 0), SCAN)
    assert faults == [] and [u.why for u in unreachable] == [OUTSIDE_SEAM]
    assert jobs[0].after == []  # no power loss is modelled from a log that saw nothing


def test_a_phase_the_backend_does_not_announce_becomes_the_operation_that_starts_it():
    rec, why = _aim({"kind": "rank_crash", "phase": "write"}, DCP, 3)
    assert why is None and rec == Fault.from_dict(
        {"kind": "rank_crash", "op": "write", "path": "*/step-3/__*_0.distcp", "when": "before"}
    )
    rec, _ = _aim({"kind": "rank_crash", "trigger": {"phase": "commit_rename"}}, DCP, 3)  # nested alike
    assert (rec.target.op, rec.target.path, rec.trigger.phase) == ("rename", "*/step-3/.metadata.tmp", None)
    rec, why = _aim({"kind": "rank_crash", "phase": "tracker_update"}, DCP, 3)
    assert rec is None and "never reaches a 'tracker_update' phase" in why


def test_the_commit_rename_of_a_per_rank_library_is_the_rename_that_publishes_its_metadata(tmp_path):
    """Each rank renames its own data file into place, then rank 0 its manifest: that rename is the commit."""
    from resilience.faults.layout import _phases

    root = str(tmp_path)
    ops = [
        _op("create", f"{root}/iter_13/rank_1.pt.tmp-41", rank=1),
        _op("rename", f"{root}/iter_13/rank_1.pt.tmp-41", dst=f"{root}/iter_13/rank_1.pt", rank=1),
        _op("create", f"{root}/iter_13/manifest.json.tmp-40"),
        _op("rename", f"{root}/iter_13/manifest.json.tmp-40", dst=f"{root}/iter_13/manifest.json"),
    ]
    roles = {"iter_13/rank_1.pt": "data", "iter_13/manifest.json": "metadata"}
    phases = _phases(root, ops, roles)
    commit = {"op": "rename", "path": "iter_13/manifest.json.tmp-40", "rank": 0, "ranks": [0]}
    assert phases["commit_rename"] == commit  # rank 0 alone publishes
    assert phases["write"]["path"] == "iter_13/rank_1.pt.tmp-41"
    files = (LayoutFile("iter_{iteration}/rank_1.pt", "data", 1, "iter_{iteration}/rank_1.pt.tmp-*"),)
    layout = Layout(13, files, True, "oplog", phases)
    aimed, why = _aim({"kind": "rank_crash", "rank": 1, "phase": "commit_rename"}, layout, 13)
    assert aimed is None and why.startswith("rank 1 never reaches the 'commit_rename' phase"), why
    assert _aim({"kind": "rank_crash", "rank": 0, "phase": "commit_rename"}, layout, 13)[0] is not None
    del roles["iter_13/manifest.json"]  # a save whose metadata no rename publishes: its first rename
    assert _phases(root, ops, roles)["commit_rename"]["path"] == "iter_13/rank_1.pt.tmp-41"


def _op(op, path, dst=None, rank=0):
    from resilience.faults.oplog import Op

    return Op(op=op, rank=rank, seq=0, t=0, path=path, dst=dst, stream=f"{rank}:{path}")


def test_a_fault_with_nothing_to_aim_is_itself():
    fault = Fault.from_dict({"kind": "io_error", "rank": 1, "path": "*.pt", "errno": "EIO"})
    assert aim(fault, DCP, 3) == (fault, None) and aim(fault, DCP, 3)[0] is fault


def test_a_rank_that_writes_no_such_file_cannot_be_aimed_at():
    rec, why = _aim({"kind": "io_error", "rank": 2, "path": "@data"}, DCP, 3)
    assert rec is None and why.startswith("rank 2 writes no data file")


def test_a_backend_that_writes_some_files_through_the_seam_is_aimed_at_those_only():
    """megatron-core: its writer processes write the shards outside the seam, rank 0 the tracker inside it."""
    partial = Layout(
        13,
        (
            LayoutFile("iter_{iteration:07d}/__1_0.distcp", "data"),
            LayoutFile("latest_checkpointed_iteration.txt", "pointer", 0, "latest_checkpointed_iteration.txt"),
        ),
        False,
        "oplog and scan",
        {"tracker_update": {"op": "create", "path": "latest_checkpointed_iteration.txt", "rank": 0}},
    )
    assert _aim({"kind": "io_error", "rank": 1, "path": "@data"}, partial, 3) == (None, OUTSIDE_SEAM)
    assert _aim({"kind": "rank_crash", "phase": "write"}, partial, 3) == (None, OUTSIDE_SEAM)
    rec, why = _aim({"kind": "rank_crash", "phase": "tracker_update"}, partial, 3)
    assert why is None and (rec.target.op, rec.target.path) == ("create", "*/latest_checkpointed_iteration.txt")


def test_a_writer_kill_follows_the_writer_the_adapter_declares_over_the_one_a_save_showed():
    from dataclasses import replace

    from resilience.runner.aiming import DECLARED, IN_RANK

    kill = {"kind": "writer_kill", "rank": 1, "path": "@data"}
    seen_process = replace(DCP, data_writer="process")
    assert _aim(kill, seen_process, 13)[0] is not None  # a writer process was seen: aimed at its data file
    assert _aim(kill, replace(DCP, data_writer="thread"), 13) == (None, IN_RANK)
    declared = replace(seen_process, data_writer="thread", writer_declared=True)
    assert _aim(kill, declared, 13) == (None, DECLARED.format(kind="thread"))
    assert Layout.from_dict(declared.to_dict()) == declared  # kept in layout.json as declared


def test_a_phase_aimed_at_any_iteration_of_a_zero_padded_layout_is_a_glob():
    padded = Layout(
        3,
        (LayoutFile("iter_{iteration:07d}/rank_0.pt", "data", 0, "iter_{iteration:07d}/rank_0.pt.tmp-*"),),
        True,
        "oplog",
        {"commit_rename": {"op": "rename", "path": "iter_0000003/manifest.json.tmp", "rank": 0}},
    )
    aimed, why = _aim({"kind": "rank_crash", "rank": 0, "phase": "commit_rename"}, padded, None)
    assert why is None and aimed.target.path == "*/iter_*/manifest.json.tmp", aimed
    aimed, _ = _aim({"kind": "rank_crash", "rank": 0, "phase": "commit_rename"}, padded, 4)
    assert aimed.target.path == "*/iter_0000004/manifest.json.tmp", aimed


def test_a_fault_on_an_operation_the_rank_never_did_in_a_clean_save_is_not_in_the_backend():
    from dataclasses import replace

    layout = replace(DCP, op_ranks={"create": [0, 1], "write": [0, 1], "rename": [0]})
    fault, why = _aim({"kind": "slow_write", "target": {"rank": 1, "op": "fsync"}, "delay": 1.0}, layout, 3)
    assert fault is None and why.startswith("in one clean save rank 1 did no fsync") and "create, rename, write" in why
    fault, why = _aim({"kind": "slow_write", "target": {"rank": 1, "op": "rename"}}, layout, 3)
    assert fault is None and "rank 1 did no rename" in why
    fault, why = _aim({"kind": "slow_write", "target": {"op": "rename"}}, layout, 3)
    assert fault is not None and why is None  # rank 0 renames
    # a layout learned before operation kinds were kept, or one outside the seam, says nothing of them
    assert _aim({"kind": "slow_write", "target": {"rank": 1, "op": "fsync"}}, DCP, 3)[0] is not None
    assert _aim({"kind": "slow_write", "target": {"rank": 1, "op": "fsync"}}, replace(layout, seam=False), 3)[0]
