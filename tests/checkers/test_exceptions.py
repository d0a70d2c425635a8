"""The exception contract: a save that raises something `except Exception` cannot catch is a FAIL naming
the class and its bases; an ordinary error passes; nothing raised is N/A."""

import os

import pytest

from resilience.checkers import FAIL, NA, PASS, Evidence, ExceptionContract
from resilience.runner.run import run_case
from resilience.runner.scenario import load_text
from resilience.state import Topology
from resilience.vocab.combos import Combination
from tests.backends.inhouse import InhouseBackend

COMBO = Combination.parse("LOCAL/torch/sync")


class SaveAborted(BaseException):  # noqa: N818  (named as such libraries name theirs)
    """An error class that derives from BaseException only, as torch DCP's CheckpointException does."""


class AbortsSecondSave(InhouseBackend):
    saves = 0

    def save(self, state, root):
        type(self).saves += 1
        if type(self).saves == 2:
            raise SaveAborted("the writer gave up")
        super().save(state, root)


def aborts_second_save(combo):
    return AbortsSecondSave(combo)


aborts_second_save.combinations = ("LOCAL/torch/sync",)

SCENARIO = """
name: second-save-raises
topology: tp1pp1dp2
combinations: [LOCAL/torch/sync]
steps: [{train: 1}, save, {train: 1}, save, resume]
"""


def _evidence(errors):
    return Evidence(COMBO, Topology(), [], [], [], [], [], lambda iteration: "", errors=errors)


def test_unit_verdicts():
    check = ExceptionContract().check
    assert check(_evidence([])).status == NA
    assert check(_evidence([{"op": "save", "rank": 0, "error": "OSError: full"}])).status == PASS
    v = check(_evidence([{"op": "save", "rank": 1, "error": "X: y", "not_exception": ["m.X"]}]))
    assert v.status == FAIL and "m.X -> BaseException" in v.detail and "except Exception" in v.detail


@pytest.mark.multiprocess
def test_a_save_raising_a_base_exception_fails_the_contract(tmp_path):
    result = run_case(
        load_text(SCENARIO), COMBO, str(tmp_path / "case"), backend="tests.checkers.test_exceptions:aborts_second_save"
    )
    verdict = next(v for v in result.verdicts if v.checker == "exceptions")
    assert verdict.status == FAIL, result.verdicts
    assert "SaveAborted" in verdict.detail and "BaseException" in verdict.detail
    assert os.path.isdir(result.case_dir)


@pytest.mark.multiprocess
def test_the_reference_raising_oserror_keeps_the_contract(tmp_path):
    scenario = load_text(
        SCENARIO.replace("second-save-raises", "enospc").replace(
            "{train: 1}, save, resume",
            "{train: 1}, {fault: {kind: io_error, errno: ENOSPC, op: write, nth: 1}}, save, resume",
        )
    )
    result = run_case(scenario, COMBO, str(tmp_path / "case"), backend="reference")
    verdict = next(v for v in result.verdicts if v.checker == "exceptions")
    assert verdict.status == PASS, result.verdicts
