"""`resilience job` on a real torchrun job: DDP on gloo, per-rank torch.save and a tracker file
(examples/jobs/ddp_torchsave.py). The golden run and one column by default; every column, and the variant that
loads without its digest (torch.load takes a flipped exponent bit without a word), under -m slow."""

import dataclasses
import os
import sys

import pytest

from resilience.job.columns import COLUMNS
from resilience.job.matrix import run_job
from resilience.verdicts import FAIL, NA, PASS

from .conftest import ROOT, options

EXAMPLE = ROOT / "examples" / "jobs" / "ddp_torchsave.py"

pytestmark = pytest.mark.multiprocess


def ddp(*extra: str) -> list[str]:
    torchrun = [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "2"]
    return [*torchrun, str(EXAMPLE), "--ckpt-dir", "{ckpt}", *extra]


@pytest.fixture(scope="module")
def ddp_golden(tmp_path_factory):
    from resilience.fusefs import fuse_available

    ok, why = fuse_available()
    if not ok:
        pytest.skip(why)
    done = run_job(options(tmp_path_factory.mktemp("ddp-golden"), ddp()))
    return done.reference


def test_the_golden_run_learns_the_ranks_saves_and_tracker(ddp_golden):
    layout = ddp_golden.layout
    assert layout.ranks == (0, 1) and [s.step for s in layout.saves] == [4, 8, 12]
    assert layout.pointer() == "latest_checkpointed_iteration.txt"
    assert layout.write_glob(8, 1) == "*/iter_0000008/rank_1.pt.tmp"
    assert ddp_golden.golden.acks == (4, 8, 12) and ddp_golden.golden.last_step == 12


def test_a_rank_killed_in_its_write_resumes_from_the_acknowledged_save(tmp_path, ddp_golden):
    done = run_job(options(tmp_path, ddp(), columns=("kill-rank-write",), golden=ddp_golden.folder))
    [row] = done.rows
    assert row.verdict == PASS, row.detail
    fired = row.faults[0]
    assert fired.status == "fired" and "by rank 1" in fired.detail and "iter_0000008/rank_1.pt.tmp" in fired.detail
    assert "resumed from step 4" in {v.checker: v for v in row.checkers}["resumed_newest"].detail
    runs = sorted(n for n in os.listdir(row.case_dir) if n.startswith("run-"))
    assert runs == ["run-0", "run-1"]
    # torchrun's temporary folder (torchelastic_*) lived in the run's own, and went with it
    assert not any(os.path.exists(os.path.join(row.case_dir, r, "tmp")) for r in runs)


def test_a_node_killed_alone_leaves_the_other_to_fail_and_the_job_resumes_whole(tmp_path):
    """Two torchrun agents on 127.0.0.1, one worker each: node 1's agent and worker SIGKILLed between saves,
    node 0 left to notice on its own; then both started again, resuming from the acknowledged save."""
    torchrun = [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "1"]
    argv = [*torchrun, str(EXAMPLE), "--ckpt-dir", "{ckpt}"]
    opts = options(tmp_path, argv, columns=("node-kill",))
    opts = dataclasses.replace(opts, command=dataclasses.replace(opts.command, nodes=2))
    done = run_job(opts)
    assert done.reference.layout.ranks == (0, 1) and done.reference.golden.nodes == 2
    [row] = done.rows
    assert row.verdict == PASS, row.detail
    fired = row.faults[0].detail
    assert "only node 1 SIGKILLed, then node 0: " in fired, fired
    assert "resumed from step 8" in {v.checker: v for v in row.checkers}["resumed_newest"].detail
    assert "--nodes 2" in row.replay
    run = tmp_path / row.case_dir / "run-1"  # each node's own output, beside the whole job's
    assert "step 12 loss" in (run / "output.node0.log").read_text() and (run / "output.node1.log").exists()


@pytest.mark.slow
def test_every_column_passes_on_the_correct_job(tmp_path, ddp_golden):
    done = run_job(options(tmp_path, ddp(), matrix=True, golden=ddp_golden.folder))
    want = dict.fromkeys(COLUMNS, PASS) | {"node-kill": NA}  # one agent: its own test above, with --nodes 2
    assert {r.column: r.verdict for r in done.rows} == want, [r.detail for r in done.rows]


@pytest.mark.slow
def test_torch_load_trains_on_a_flipped_bit_without_a_word(tmp_path, ddp_golden):
    done = run_job(options(tmp_path, ddp("--variant", "unchecked"), columns=("bit-flip",), golden=ddp_golden.folder))
    [row] = done.rows
    damage = {v.checker: v for v in row.checkers}["no_silent_damage"]
    assert damage.status == FAIL and "trained on the damaged checkpoint of step 8" in damage.detail
