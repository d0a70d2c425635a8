"""The exception contract: a save that raises something `except Exception` cannot catch is a FAIL naming
the class and its bases; an ordinary error passes; nothing raised is N/A."""

import os

import pytest

from resilience.checkers import FAIL, NA, PASS, WARN, Evidence, ExceptionContract, LoadRecord
from resilience.errors import RankFailure
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


class TranslatesSecondSave(AbortsSecondSave):
    """An adapter over that library: it translates the library's error into the protocol's, as ours do."""

    def save(self, state, root):
        try:
            super().save(state, root)
        except SaveAborted as e:
            raise RankFailure({0: repr(e)}, "the library's save failed") from e


def translates_second_save(combo):
    return TranslatesSecondSave(combo)


translates_second_save.combinations = ("LOCAL/torch/sync",)

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


def test_what_the_library_raised_under_the_adapters_error_is_judged_too():
    check = ExceptionContract().check
    raw = {"error": "CheckpointException: ranks [1]", "not_exception": ["dcp.CheckpointException"]}
    translated = {"op": "save", "rank": 1, "error": "RankFailure: failures={1}", "raw": raw}
    v = check(_evidence([translated]))
    assert v.status == FAIL and "translated by the adapter from the library's CheckpointException" in v.detail
    assert "dcp.CheckpointException -> BaseException" in v.detail
    fine = dict(translated, raw={"error": "OSError: [Errno 28] No space left on device"})
    v = check(_evidence([fine]))
    assert v.status == PASS and "the library's own under each translated one too" in v.detail


def _failed_load(error: str, rank_errors=None, raw=None) -> Evidence:
    damage = {"index": 5, "iteration": 3, "rel": "iter_0000003/rank_1.pt", "kind": "truncate"}
    load = LoadRecord(1, "tp1pp1dp2", "fail", 9, error=error, raw=raw, rank_errors=rank_errors or {})
    return Evidence(COMBO, Topology(), [], [load], [damage], [], [], lambda iteration: "")


def test_a_load_failing_on_a_damaged_file_should_name_it():
    check = ExceptionContract().check
    v = check(_failed_load("RuntimeError: another rank could not load"))
    assert v.status == WARN and v.detail.startswith("the load in job 1 failed on damaged iter_0000003/rank_1.pt")
    assert v.evidence[0]["level"] == "WARN"
    # named by any rank, or by what the library raised under the adapter's error: no warning
    named = {1: "RuntimeError: /ckpt/iter_0000003/rank_1.pt: failed finding central directory"}
    assert check(_failed_load("RuntimeError: another rank could not load", named)).status == PASS
    raw = {"error": "RuntimeError: PytorchStreamReader failed reading rank_1.pt"}
    assert check(_failed_load("IntegrityError: iter_0000003: load failed", raw=raw)).status == PASS
    v = check(_failed_load("IntegrityError: x", raw={"error": "E: y", "not_exception": ["lib.E"]}))
    assert v.status == FAIL and "the load in job 1 raised IntegrityError: x" in v.detail


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
def test_an_adapter_translating_the_librarys_base_exception_does_not_hide_it(tmp_path):
    backend = "tests.checkers.test_exceptions:translates_second_save"
    result = run_case(load_text(SCENARIO), COMBO, str(tmp_path / "case"), backend=backend)
    verdict = next(v for v in result.verdicts if v.checker == "exceptions")
    assert verdict.status == FAIL, result.verdicts
    assert "save raised RankFailure" in verdict.detail
    assert "from the library's SaveAborted" in verdict.detail and "SaveAborted -> " in verdict.detail


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
