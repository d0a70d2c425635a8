"""A background writer process killed alone while the rank lives on (the writer_kill fault and matrix
column, scenarios/writer-kill.yaml): fired on stock DCP's checkpoint process and judged; N/A where the
writer is a thread of the rank (the reference) or the save is sync; a hang is a FAIL named as one."""

import json
import os
from dataclasses import replace

import pytest

from resilience.runner.aiming import NO_WRITER
from resilience.runner.plan import plan_jobs
from resilience.runner.run import run_case
from resilience.runner.scenario import load_file
from resilience.vocab.combos import Combination

SCENARIO = os.path.join(os.path.dirname(__file__), "..", "..", "scenarios", "writer-kill.yaml")


def _verdicts(result) -> dict:
    return {v.checker: v for v in result.verdicts}


def _firings(case) -> list[dict]:
    path = case / "faults.jsonl"
    return [json.loads(line) for line in open(path)] if path.exists() else []


def test_a_sync_save_has_no_writer_to_kill():
    s = load_file(SCENARIO)
    [job, *_] = plan_jobs(s, Combination.parse("GLOBAL/torch_dist/sync"))
    assert job.kills == [] and [u.why for u in job.unreachable] == [NO_WRITER]


@pytest.mark.multiprocess
def test_stock_dcp_checkpoint_process_killed_and_judged(tmp_path):
    """DCP's process executor (`async=process`): the nemesis kills rank 1's checkpoint process as it writes
    step-3's data, the ranks live on, finalize raises on both, nothing of step 3 is loaded; the same job's
    next save fails on both ranks (the dead process is never replaced, and rank 0's has lost its group)."""
    case = tmp_path / "case"
    result = run_case(
        load_file(SCENARIO), Combination.parse("TORCH_DCP/torch_dcp/async"), str(case), backend="dcp:async=process"
    )
    [fired] = _firings(case)
    assert fired["action"] == "kill writer" and fired["ranks"] == [1], fired
    [writer] = fired["writers"]
    assert "spawn_main" in writer["process"] and writer["file"].endswith(os.path.join("step-3", "__1_0.distcp"))
    assert fired["pids"] == [writer["pid"]] and fired["reached"] == fired["pids"]
    events = [json.loads(line) for line in open(case / "history.jsonl")]
    [end] = [e for e in events if e["f"] == "job" and e["type"] != "invoke" and e["value"]["job"] == 0]
    assert end["value"]["signals"] == {} and not end["value"]["timed_out"]  # no rank was killed, none hung
    v = _verdicts(result)
    assert v["symmetry"].status == "PASS" and v["atomic_commit"].status == "PASS", result.to_row()
    assert v["hang"].status == "PASS", v["hang"]
    assert v["recovery"].status == "FAIL" and "raised on ranks [0, 1]" in v["recovery"].detail, v["recovery"]
    assert result.verdict == "FAIL" and "--backend dcp:async=process" in result.replay


@pytest.mark.multiprocess
def test_the_reference_writer_is_a_thread_so_the_case_is_not_applicable(tmp_path):
    result = run_case(load_file(SCENARIO), Combination.parse("GLOBAL/torch_dist/async"), str(tmp_path / "case"))
    assert result.verdict == "N/A", result.to_row()
    [fault] = result.faults
    assert fault["status"] == "not in this backend"
    assert "the writer is a thread of the rank; nothing to kill alone" in fault["detail"]
    assert _firings(tmp_path / "case") == []


@pytest.mark.multiprocess
def test_a_writer_that_dies_unseen_is_a_hang_and_done_right_it_passes(tmp_path):
    """broken:writer_death_hangs keeps the dead writer's pipe end open: every rank waits in finalize until
    the job's timeout (shortened here). The same process writer done right passes every checker. The model
    is wide enough that a data file takes the writer tens of milliseconds: a writer killed after its last
    answer hangs nothing (the file was done), and the tiny default model's files are done in a few."""
    s = load_file(SCENARIO)
    s = replace(s, timeout=45.0, model=replace(s.model, hidden=256, ffn_hidden=1024, vocab=1000))
    combo = Combination.parse("GLOBAL/torch_dist/async")
    hung = run_case(s, combo, str(tmp_path / "hung"), backend="broken:writer_death_hangs")
    v = _verdicts(hung)
    assert hung.verdict == "FAIL" and v["hang"].status == "FAIL", hung.to_row()
    assert v["hang"].detail.startswith("hang: after writer_kill") and "finalize of iteration 3" in v["hang"].detail
    right = run_case(s, combo, str(tmp_path / "right"), backend="resilience.broken.impls:process_writer")
    v = _verdicts(right)
    assert right.verdict == "PASS", right.to_row()
    assert v["recovery"].status == "PASS" and v["hang"].status == "PASS"
