"""`resilience job` on a real job (the quick test job: a launcher and two worker processes, as torchrun
starts them, through the mount): the correct job passes every column, and each deliberately broken
variant is caught by the checker named, with the evidence it gives."""

import json
import os
import re

import pytest

from resilience.job.columns import COLUMNS
from resilience.job.matrix import run_job
from resilience.verdicts import FAIL, NA, PASS, REFUSED

from .conftest import options, quick

pytestmark = pytest.mark.multiprocess


def test_a_correct_job_passes_every_column(tmp_path, quick_golden):
    done = run_job(options(tmp_path, quick(), matrix=True, golden=quick_golden))
    assert [r.column for r in done.rows] == list(COLUMNS)
    # node-kill needs --nodes: one process is one node
    assert {r.column: r.verdict for r in done.rows} == dict.fromkeys(COLUMNS, PASS) | {"node-kill": NA}
    for r in done.rows:
        if r.column == "node-kill":
            assert "the job runs as one node (give --nodes 2" in r.detail
            continue
        assert [f.status for f in r.faults] == ["fired"], r.faults
        assert r.replay.startswith("resilience job --column ") and "--golden" in r.replay
    with open(os.path.join(done.folder, "results.json")) as f:
        assert len(json.load(f)) == len(COLUMNS)
    assert os.path.exists(os.path.join(done.folder, "junit.xml"))


def test_the_golden_run_keeps_its_curve_and_layout(quick_golden):
    with open(os.path.join(quick_golden, "curve.json")) as f:
        curve = json.load(f)
    with open(os.path.join(quick_golden, "layout.json")) as f:
        layout = json.load(f)
    assert curve["last_step"] == 12 and curve["acks"] == [4, 8, 12] and len(curve["curve"]) == 12
    assert [s["step"] for s in layout["saves"]] == [4, 8, 12] and layout["ranks"] == [0, 1]
    assert layout["saves"][1]["files"] == {"0": ["iter_0000008/rank_0.bin.tmp"], "1": ["iter_0000008/rank_1.bin.tmp"]}


BROKEN = [
    ("scratch", "kill-job-between", "resumed_newest", "started from scratch, older than the newest acknowledged"),
    ("skip_data", "kill-job-between", "curve_equal", "run 1 step 9: loss"),
    ("unchecked", "bit-flip", "no_silent_damage", "trained on the damaged checkpoint of step 8"),
    ("stop_early", "kill-job-between", "reached_end", "stopped at step 10 of 12"),
    ("hang_on_resume", "kill-job-between", "no_hang", "run 1 did not end within 8 s"),
    ("ack_early", "kill-job-mid-save", "checkpoint_left", "no acknowledged checkpoint loads"),
    ("no_fsync", "power-loss", "resumed_newest", "(fsynced only; states: 3 FAIL, 1 PASS): started from scratch"),
    ("frozen_data", "chained", "curve_equal", "run 2 step 9: loss"),
]


@pytest.mark.parametrize("variant, column, checker, says", BROKEN, ids=[b[0] for b in BROKEN])
def test_each_broken_variant_is_caught_by_its_checker(tmp_path, quick_golden, variant, column, checker, says):
    done = run_job(options(tmp_path, quick("--variant", variant), columns=(column,), golden=quick_golden, timeout=8.0))
    [row] = done.rows
    verdicts = {v.checker: v for v in row.checkers}
    assert row.verdict == FAIL and verdicts[checker].status == FAIL, row.detail
    assert says in verdicts[checker].detail
    assert row.faults[0].status == "fired"


def _hung(folder, quick_golden, variant):
    """The no_hang verdict of `variant` killed between saves, and the case's folder."""
    done = run_job(
        options(folder, quick("--variant", variant), columns=("kill-job-between",), golden=quick_golden, timeout=8.0)
    )
    [hang] = [v for v in done.rows[0].checkers if v.checker == "no_hang"]
    return hang, done.rows[0].case_dir


def test_a_hang_shows_the_process_tree_or_the_stacks_the_job_asked_for(tmp_path, quick_golden):
    hang, _ = _hung(tmp_path / "a", quick_golden, "hang_on_resume")
    tree = hang.evidence[0]["processes"]
    assert {p["rank"] for p in tree} >= {"0", "1", None} and all("quick_train.py" in p["cmdline"] for p in tree)
    assert "its process tree only" in hang.detail
    hang, case_dir = _hung(tmp_path / "b", quick_golden, "hang_on_resume_with_stacks")
    assert "faulthandler stacks in the output from line" in hang.detail
    with open(os.path.join(case_dir, "run-1", "output.log")) as f:
        text = f.read()
    # the job's train() frame: faulthandler writes a frame's function name in one write of its own, so two
    # workers dumping at once may cut "line N in train" apart, never the name itself
    assert "most recent call first" in text and re.search(r"(?<![\w./])train(?![\w.])", text)


def test_a_job_that_hard_codes_its_folder_is_mounted_there(tmp_path, quick_golden):
    fixed = tmp_path / "fixed"
    fixed.mkdir()
    (fixed / "old-run.txt").write_text("left by an earlier run")
    argv = quick()[:-1] + [str(fixed)]  # --ckpt-dir <the folder itself>, no {ckpt}
    done = run_job(options(tmp_path / "out", argv, ckpt_dir=str(fixed), columns=("kill-rank-write",)))
    assert done.rows[0].verdict == PASS, done.rows[0].detail
    assert sorted(os.listdir(fixed)) == ["old-run.txt"]  # every run wrote through the mount, to its case folder


def test_a_loud_refusal_is_told_in_the_jobs_own_words_not_its_banner(tmp_path, quick_golden):
    done = run_job(options(tmp_path, quick("--variant", "refuse"), columns=("truncate",), golden=quick_golden))
    [row] = done.rows
    [damage] = [v for v in row.checkers if v.checker == "no_silent_damage"]
    assert damage.status == REFUSED, row.detail
    assert damage.detail.startswith("refused the damaged checkpoint loudly (") and "not a whole checkpoint file" in (
        damage.detail
    ), damage.detail


def test_a_data_position_frozen_by_the_first_resume_shows_only_in_a_second(tmp_path, quick_golden):
    done = run_job(
        options(tmp_path, quick("--variant", "frozen_data"), columns=("kill-job-between",), golden=quick_golden)
    )
    assert done.rows[0].verdict == PASS, done.rows[0].detail  # one resume: nothing to see


def test_a_launcher_that_sets_only_local_rank_has_its_ranks_attributed(tmp_path):
    done = run_job(options(tmp_path, quick("--rank-env", "LOCAL_RANK"), columns=("kill-rank-write",)))
    [row] = done.rows
    assert row.verdict == PASS, row.detail
    assert done.reference.layout.ranks == (0, 1)  # each worker's files are its rank's, read from LOCAL_RANK
    assert "by rank 1" in row.faults[0].detail, row.faults[0].detail


def test_a_job_that_ignores_sigterm_is_caught_after_the_grace(tmp_path):
    argv = quick("--step-time", "0.3", "--variant", "ignore_sigterm")
    done = run_job(options(tmp_path, argv, columns=("sigterm",), term_grace=0.5))
    [row] = done.rows
    verdict = {v.checker: v for v in row.checkers}["stops_on_sigterm"]
    assert row.verdict == FAIL and verdict.status == FAIL, row.detail
    assert "ignored SIGTERM through the grace and were SIGKILLed" in verdict.detail
    assert any("quick_train.py" in p["cmdline"] for p in verdict.evidence), verdict.evidence
