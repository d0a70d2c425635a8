"""No case leaves anything in temp: not a rank SIGKILLed mid-write, not an async save's checkpoint process
(stock DCP's `async=process` makes multiprocessing pymp-* folders in its rank), not one killed from outside.
The runner gets a private temp folder, so parallel tests' files are not counted."""

import pytest

from resilience.runner.adapters import make_backend
from resilience.runner.matrix import fault_scenario
from resilience.runner.run import run_case
from resilience.vocab.combos import Combination
from tests.temp_folders import left_in, private_temp

pytestmark = pytest.mark.multiprocess

ASYNC_PROCESS = Combination.parse("TORCH_DCP/torch_dcp/async"), "dcp:async=process"


def _case(column: str, case_dir) -> tuple[dict, list[str]]:
    """The matrix's case for `column` on DCP's checkpoint process; its faults' fate and what it left in temp."""
    combo, backend = ASYNC_PROCESS
    # imported first: importing DCP makes torch's per-user cache (torchinductor_<user>) once in the runner's
    # temp folder, a folder every later run reuses, not one a case leaves
    make_backend(backend, combo)
    with private_temp() as temp:
        result = run_case(fault_scenario(column, 0), combo, str(case_dir), backend=backend)
        return {f["fault"].split()[0]: f["status"] for f in result.faults}, left_in(temp)


def test_a_rank_killed_mid_write_leaves_nothing_in_temp(tmp_path, fuse):
    faults, left = _case("kill", tmp_path / "case")
    assert faults["rank_crash"] == "fired", faults  # rank 1 SIGKILLed 256 bytes into a data file
    assert left == []


def test_an_async_checkpoint_process_killed_or_not_leaves_nothing_in_temp(tmp_path, fuse):
    faults, left = _case("writer_kill", tmp_path / "case")
    assert "writer_kill" in faults, faults  # fired or not, every save ran through the checkpoint process
    assert left == []
