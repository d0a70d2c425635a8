"""`resilience job` on examples/jobs/fsdp2_dcp.py, a torchtitan-style job: FSDP2 on gloo CPU and
torch.distributed.checkpoint (step-N folders of per-rank .distcp shards and a .metadata, the newest two
kept, no tracker). The golden run and one column by default; the whole matrix, sync and async, under
-m slow, each asserting the verdicts measured on it."""

import sys
from pathlib import Path

import pytest

from resilience.fusefs import fuse_available
from resilience.job.columns import COLUMNS
from resilience.job.matrix import run_job
from resilience.verdicts import NA, PASS

from .conftest import options

pytestmark = pytest.mark.multiprocess

JOB = Path(__file__).resolve().parents[2] / "examples" / "jobs" / "fsdp2_dcp.py"


def fsdp(*extra: str) -> list[str]:
    torchrun = [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "2"]
    return [*torchrun, str(JOB), "--ckpt-dir", "{ckpt}", *extra]


def golden(tmp_path_factory, name: str, argv: list[str]):
    ok, why = fuse_available()
    if not ok:
        pytest.skip(why)
    return run_job(options(tmp_path_factory.mktemp(name), argv)).reference


@pytest.fixture(scope="module")
def sync_golden(tmp_path_factory):
    return golden(tmp_path_factory, "fsdp2-golden", fsdp())


@pytest.fixture(scope="module")
def async_golden(tmp_path_factory):
    return golden(tmp_path_factory, "fsdp2-async-golden", fsdp("--async-save"))


def test_the_golden_run_learns_the_dcp_saves_and_their_shards(sync_golden):
    layout = sync_golden.layout
    assert layout.ranks == (0, 1) and [s.step for s in layout.saves] == [4, 8, 12]
    assert layout.write_glob(8, 1) == "*/step-8/__1_0.distcp"
    assert layout.final_path(8, 0) == "step-8/__0_0.distcp"
    assert layout.pointer() is None  # DCP keeps no tracker: the newest folder with a .metadata is the pointer
    assert sync_golden.golden.acks == (4, 8, 12) and sync_golden.golden.last_step == 12


def test_a_rank_killed_in_its_shard_resumes_from_the_acknowledged_save(tmp_path, sync_golden):
    done = run_job(options(tmp_path, fsdp(), columns=("kill-rank-write",), golden=sync_golden.folder))
    [row] = done.rows
    assert row.verdict == PASS, row.detail
    fired = row.faults[0]
    assert fired.status == "fired" and "by rank 1" in fired.detail and "step-8/__1_0.distcp" in fired.detail
    assert "resumed from step 4" in {v.checker: v for v in row.checkers}["resumed_newest"].detail


@pytest.mark.slow
def test_every_column_passes_on_the_sync_job(tmp_path, sync_golden):
    done = run_job(options(tmp_path, fsdp(), matrix=True, golden=sync_golden.folder))
    expected = {**dict.fromkeys(COLUMNS, PASS), "tracker-empty": NA, "node-kill": NA}
    assert {r.column: r.verdict for r in done.rows} == expected, [r.detail for r in done.rows]
    [flip] = [r for r in done.rows if r.column == "bit-flip"]
    damage = {v.checker: v for v in flip.checkers}["no_silent_damage"]
    assert "SHA-256 mismatch" in damage.detail  # DCP takes a flipped bit; the job's digest does not


@pytest.mark.slow
def test_every_column_passes_on_the_async_job_whose_acks_come_late(tmp_path, async_golden):
    # an async save is acknowledged once its future is done, steps after it began: a kill between saves
    # waits for that acknowledgement, so every column still strikes between two saves
    done = run_job(options(tmp_path, fsdp("--async-save"), matrix=True, golden=async_golden.folder))
    expected = {**dict.fromkeys(COLUMNS, PASS), "tracker-empty": NA, "node-kill": NA}
    assert {r.column: r.verdict for r in done.rows} == expected, [r.detail for r in done.rows]
