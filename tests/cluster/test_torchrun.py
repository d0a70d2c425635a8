"""Two torchrun node agents on loopback (c10d rendezvous on 127.0.0.1, 2 ranks each): a rank kills itself
mid-save, torchrun restarts the group, and the restarted group resumes from the newest valid checkpoint.

torchrun starts every rank by spawning a fresh interpreter that imports torch (~2.5 s each here), so these
runs keep to 2 agents x 2 ranks and as few attempts as the point needs."""

import json
import os
import time

import psutil
import pytest

from resilience.cli import main
from resilience.cluster import ClusterPlan, SharedFolder
from resilience.cluster.nodes import free_port, run_local, this_python_torchrun, torchrun_commands
from resilience.cluster.verdicts import read_summary
from resilience.faults import read_firings

pytestmark = pytest.mark.multiprocess


def _ours(marker: str) -> list[psutil.Process]:
    """Every live process whose command line names `marker` (catches orphans the fixture cannot see)."""
    out = []
    for p in psutil.process_iter(["cmdline"]):
        try:
            if any(marker in a for a in p.info["cmdline"] or []) and p.status() != psutil.STATUS_ZOMBIE:
                out.append(p)
        except psutil.Error:
            pass
    return out


def _tail(paths, n=40) -> str:
    out = []
    for p in paths:
        if os.path.exists(p):
            out.append(f"--- {p}\n" + "".join(open(p, errors="replace").readlines()[-n:]))
    return "\n".join(out)


def _run(tmp_path, plan: ClusterPlan, timeout: float = 300.0):
    shared = tmp_path / "shared"
    cmds = torchrun_commands(
        plan,
        shared=str(shared),
        nnodes=2,
        nproc_per_node=2,
        rdzv_endpoint=f"127.0.0.1:{free_port()}",
        rdzv_id=f"test-{os.getpid()}-{time.time_ns()}",
        timeout=90,
        torchrun=this_python_torchrun(),
        one_machine=True,
    )
    outcome = run_local(cmds, timeout=timeout, log_dir=str(tmp_path / "logs"), tmp_dir=str(tmp_path / "tmp"))
    return shared, outcome


def test_kill_restart_and_resume_from_the_newest_valid_checkpoint(tmp_path, capsys):
    # LEGACY is saved whole on attempt 0; the async GLOBAL save after it is cut by rank 3's kill
    plan = ClusterPlan(combos=("LEGACY/torch/sync", "GLOBAL/torch_dist/async"), kill="last")
    shared, outcome = _run(tmp_path, plan)
    assert outcome.ok, f"exit codes {outcome.exit_codes} after {outcome.seconds:.0f} s\n{_tail(outcome.logs)}"
    shared_folder = SharedFolder(str(shared))
    summary = read_summary(shared_folder)
    assert summary["ok"] and summary["exit_status"] == 0 and summary["attempts"] == 2, summary
    assert summary["world"] == 4 and summary["topology"] == {"tp": 2, "pp": 1, "dp": 2}

    # the kill: rank 3 (second node) SIGKILLed itself as its write of iteration 4 began, on attempt 0
    firings = read_firings(shared_folder.faults("GLOBAL/torch_dist/async", 3))
    assert [(f["rank"], f["phase"], f["action"]) for f in firings] == [(3, "write", "sigkill")]
    attempts = json.loads(open(shared_folder.path("attempts.json")).read())
    assert [a["attempt"] for a in attempts] == [0, 1]
    assert len({r["pid"] for a in attempts for r in a["ranks"]}) == 8  # torchrun started new processes
    assert max(r["restart_count"] for r in attempts[1]["ranks"]) == 1

    results = {r["combo"]: r for r in json.loads(open(shared_folder.path("report", "results.json")).read())}
    for combo, loaded in (("GLOBAL/torch_dist/async", 3), ("LEGACY/torch/sync", 4)):
        row = results[combo]
        assert row["verdict"] == "PASS", row
        checks = {v["checker"]: v for v in row["checkers"]}
        assert f"loaded iteration {loaded}, the newest valid on disk" in checks["newest_valid"]["detail"]
        assert checks["resume_equivalence"]["status"] == "PASS"
        assert checks["kill_and_restart"]["status"] == "PASS"
    restart = {v["checker"]: v for v in results["GLOBAL/torch_dist/async"]["checkers"]}["kill_and_restart"]
    assert "SIGKILLed itself at phase write" in restart["detail"]
    assert (shared / "report" / "junit.xml").is_file()
    assert main(["validate", "--show", str(shared)]) == 0
    assert "2 passed, 0 not passed; report: " in capsys.readouterr().out

    assert os.listdir(tmp_path / "tmp") == []  # torchrun and torch left no temp file
    assert _ours(str(shared)) == []  # no agent or worker left, orphans included


@pytest.mark.slow
def test_validate_local_all_six_combinations_one_kill_each(tmp_path, capsys):
    shared = tmp_path / "v"
    code = main(["validate", "--local", "--shared", str(shared), "--timeout", "90", "--run-timeout", "900"])
    out = capsys.readouterr().out
    assert code == 0, out + _tail(sorted(str(p) for p in (shared / "logs").glob("node*.log")))
    summary = read_summary(SharedFolder(str(shared)))
    assert summary["attempts"] == 7 and [r["verdict"] for r in summary["results"]] == ["PASS"] * 6
    assert "6 passed, 0 not passed; report: " in out
    assert _ours(str(shared)) == []


@pytest.mark.slow
def test_a_broken_implementation_fails_the_validation(tmp_path):
    # the tracker is written before the data and trusted blindly: after the kill it points at a torn save
    plan = ClusterPlan(combos=("GLOBAL/torch_dist/sync",), backend="broken:tracker_before_data")
    shared, outcome = _run(tmp_path, plan)
    assert outcome.exit_codes != [0, 0] and not outcome.timed_out, _tail(outcome.logs)
    summary = read_summary(SharedFolder(str(shared)))
    assert summary is not None and summary["exit_status"] == 1, _tail(outcome.logs)
    assert summary["results"][0]["verdict"] == "FAIL"
    assert "durability" in summary["results"][0]["detail"] and "newest_valid" in summary["results"][0]["detail"]
    assert _ours(str(shared)) == []


@pytest.mark.slow
def test_through_the_file_system_each_node_mounts_the_kill_strikes_at_a_byte(tmp_path, fuse):
    """validate --io fuse: every node's torchrun runs under resilience.fusefs.node; the kill is carried out
    by the file system (a byte of the target rank's first file of the final save), not by the rank, and the
    mount outlives the kill, so the restarted ranks write through it again."""
    plan = ClusterPlan(combos=("GLOBAL/torch_dist/sync",), kill="last", io="fuse")
    shared, outcome = _run(tmp_path, plan)
    assert outcome.ok, f"exit codes {outcome.exit_codes} after {outcome.seconds:.0f} s\n{_tail(outcome.logs)}"
    shared_folder = SharedFolder(str(shared))
    summary = read_summary(shared_folder)
    assert summary["ok"] and summary["attempts"] == 2, summary
    firings = [f for p in shared_folder.fuse_firing_files() for f in read_firings(p)]
    assert [(f["rank"], f["action"], f["via"]) for f in firings] == [(3, "sigkill", "fuse")]
    row = json.loads(open(shared_folder.path("report", "results.json")).read())[0]
    restart = {v["checker"]: v for v in row["checkers"]}["kill_and_restart"]
    assert restart["status"] == "PASS" and "SIGKILLed at byte 256 of" in restart["detail"], restart
    assert not os.path.ismount(shared_folder.mount()) and _ours(str(shared)) == []
