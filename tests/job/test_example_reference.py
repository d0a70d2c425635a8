"""`resilience job` on examples/jobs/reference.py: the reference checkpoint implementation in a torchrun
training loop, one job per valid combination, picked with Megatron-LM's flags. By default the golden run of
GLOBAL sync, one column, and the refusal of an invalid combination; under -m slow the whole matrix of each
combination measured, with the verdicts it gave."""

import subprocess
import sys
from pathlib import Path

import pytest

from resilience.job.columns import COLUMNS
from resilience.job.matrix import run_job
from resilience.verdicts import PASS

from .conftest import options

pytestmark = pytest.mark.multiprocess

SCRIPT = Path(__file__).resolve().parents[2] / "examples" / "jobs" / "reference.py"
# the flags of each combination, as Megatron-LM spells them
FLAGS = {
    "LEGACY/torch/sync": ("--ckpt-format", "torch"),
    "LOCAL/torch/sync": ("--non-persistent-ckpt-type", "local"),
    "GLOBAL/torch_dist/sync": ("--ckpt-format", "torch_dist"),
    "GLOBAL/torch_dist/async": ("--ckpt-format", "torch_dist", "--async-save"),
    "TORCH_DCP/torch_dcp/sync": ("--ckpt-format", "torch_dcp"),
    "TORCH_DCP/torch_dcp/async": ("--ckpt-format", "torch_dcp", "--async-save"),
}
# the columns of the matrix when it was measured, and what each gave on each combination
MEASURED_COLUMNS = (
    "kill-rank-write",
    "kill-job-mid-save",
    "kill-job-between",
    "enospc",
    "eio",
    "truncate",
    "bit-flip",
    "delete",
    "tracker-empty",
    "power-loss",
    "slow-disk",
    "chained",
    "sigterm",
)
MEASURED = {combo: dict.fromkeys(MEASURED_COLUMNS, PASS) for combo in FLAGS}


def job(combo: str) -> list[str]:
    torchrun = [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "2"]
    return [*torchrun, str(SCRIPT), "--ckpt-dir", "{ckpt}", *FLAGS[combo]]


def needs_fuse() -> None:
    from resilience.fusefs import fuse_available

    ok, why = fuse_available()
    if not ok:
        pytest.skip(why)


@pytest.fixture(scope="module")
def global_golden(tmp_path_factory):
    needs_fuse()
    done = run_job(options(tmp_path_factory.mktemp("reference-golden"), job("GLOBAL/torch_dist/sync")))
    return done.reference


def test_the_golden_run_learns_the_saves_and_their_acks(global_golden):
    layout = global_golden.layout
    assert layout.ranks == (0, 1) and [s.step for s in layout.saves] == [4, 8, 12]
    assert layout.pointer() == "latest_checkpointed_iteration.txt"
    assert layout.write_glob(8, 1) == "*/.staging-iter_0000008-*/__1_0.distcp"
    assert global_golden.golden.acks == (4, 8, 12) and global_golden.golden.last_step == 12


def test_a_job_killed_between_saves_resumes_from_the_newest(tmp_path, global_golden):
    done = run_job(
        options(tmp_path, job("GLOBAL/torch_dist/sync"), columns=("kill-job-between",), golden=global_golden.folder)
    )
    [row] = done.rows
    assert row.verdict == PASS, row.detail
    assert "resumed from step 8" in {v.checker: v for v in row.checkers}["resumed_newest"].detail


@pytest.mark.parametrize(
    "flags, layer",
    [
        (("--ckpt-format", "torch", "--async-save"), "io: LEGACY/torch/async is not a valid combination"),
        (
            ("--ckpt-format", "torch_dist", "--non-persistent-ckpt-type", "local"),
            "format: LOCAL/torch_dist/sync is not a valid combination",
        ),
    ],
)
def test_an_invalid_combination_is_refused_with_the_reason(tmp_path, flags, layer):
    got = subprocess.run(
        [sys.executable, str(SCRIPT), "--ckpt-dir", str(tmp_path / "ckpt"), *flags],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert got.returncode == 2, got.stderr
    assert layer in got.stderr and "valid: LEGACY/torch/sync" in got.stderr
    assert not (tmp_path / "ckpt").exists()


@pytest.mark.slow
@pytest.mark.parametrize("combo", sorted(MEASURED))
def test_the_whole_matrix_gives_the_verdicts_measured(tmp_path, combo):
    needs_fuse()
    want = MEASURED[combo]
    done = run_job(options(tmp_path, job(combo), columns=tuple(c for c in want if c in COLUMNS)))
    got = {r.column: r.verdict for r in done.rows}
    assert got == {c: v for c, v in want.items() if c in COLUMNS}, {
        r.column: r.detail for r in done.rows if r.verdict != want[r.column]
    }
