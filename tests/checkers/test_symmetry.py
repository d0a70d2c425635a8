"""Failure symmetry: a rank that raises while another waits in a collective is a FAIL naming where the
waiting rank was blocked (its stacks); ranks that disagree about one save are a FAIL; the reference, whose
ranks agree on every failure, passes."""

import pytest

from resilience.checkers import FAIL, NA, PASS, Evidence, FailureSymmetry, SaveRecord
from resilience.checkers.symmetry import waiting_in
from resilience.dist import this_rank as _rank
from resilience.errors import IntegrityError
from resilience.runner.run import run_case
from resilience.runner.scenario import load_text
from resilience.state import Topology
from resilience.vocab import Combination
from tests.backends.inhouse import InhouseBackend

COMBO = Combination.parse("LOCAL/torch/sync")
STACKS = """Thread 0x00007f (most recent call first):
  File "/x/torch/distributed/distributed_c10d.py", line 4811 in barrier
  File "/x/tests/backends/inhouse.py", line 25 in _barrier

Current thread 0x00007e (most recent call first):
  File "/x/other.py", line 1 in run
"""


class RaisesOnRankOne(InhouseBackend):
    """Rank 1 gives up on its second save before the library's barrier; rank 0 waits there for it."""

    saves = 0

    def save(self, state, root):
        type(self).saves += 1
        if type(self).saves == 2 and _rank() == 1:
            raise RuntimeError("rank 1 gave up")
        super().save(state, root)


def raises_on_rank_one(combo):
    return RaisesOnRankOne(combo)


raises_on_rank_one.combinations = ("LOCAL/torch/sync",)


class LoadFailsOnRankOne(InhouseBackend):
    """Each rank checks only its own file, after the library's collective load: rank 1 finds it damaged and
    raises, rank 0 returns."""

    def load(self, state, root):
        result = super().load(state, root)
        if _rank() == 1:
            raise IntegrityError(f"{root}/rank1.pt", "checksum", "rank 1's shard is damaged")
        return result


def load_fails_on_rank_one(combo):
    return LoadFailsOnRankOne(combo)


load_fails_on_rank_one.combinations = ("LOCAL/torch/sync",)

SCENARIO = """
name: one-rank-raises
topology: tp1pp1dp2
combinations: [LOCAL/torch/sync]
steps: [{train: 1}, save, {train: 1}, save, resume]
"""


def _ev(**kw):
    return Evidence(kw.pop("combo", COMBO), Topology(), kw.pop("saves", []), [], [], [], [], lambda i: "", **kw)


def test_unit_verdicts():
    check = FailureSymmetry().check
    assert waiting_in(STACKS) == "barrier (distributed_c10d.py:4811)"
    assert check(_ev()).status == NA
    v = check(
        _ev(
            errors=[{"job": 0, "rank": 1, "error": "RuntimeError: x"}],
            blocked=[{"job": 0, "rank": 0, "error": "still running", "stacks": STACKS}],
        )
    )
    assert v.status == FAIL and "rank 1 raised RuntimeError: x" in v.detail and "blocked in barrier" in v.detail
    split = SaveRecord(0, 2, "tp1pp1dp2", None, None, "info", 3, "0.2", 2, ok_ranks=[0], errors={1: "OSError: x"})
    v = check(
        _ev(
            saves=[split],
            errors=[{"job": 0, "rank": 1, "error": "OSError: x"}],
            combo=Combination.parse("GLOBAL/torch_dist/sync"),
        )
    )
    assert v.status == FAIL and "returned on ranks [0] and raised on ranks [1]" in v.detail
    local = check(_ev(saves=[split], errors=[{"job": 0, "rank": 1, "error": "OSError: x"}]))
    assert local.status == PASS and "LOCAL saves are per rank" in local.detail
    assert check(_ev(errors=[{"job": 0, "rank": 1, "error": "OSError: x"}])).status == PASS
    told = {"job": 1, "rank": 0, "error": "still running; killed", "after": {"rank": 1, "error": "TypeError: bad"}}
    v = check(_ev(blocked=[dict(told, stacks=STACKS)]))
    assert v.status == FAIL and v.detail.startswith("rank 1 raised TypeError: bad, while rank 0 stayed blocked")
    v = check(_ev(load_splits=[{"job": 1, "ok": [0], "errors": {1: "IntegrityError: damaged"}}]))
    assert v.status == FAIL and "a load in job 1 returned on ranks [0] and raised on ranks [1]" in v.detail


@pytest.mark.multiprocess
def test_a_load_that_raises_on_one_rank_only_is_judged_not_a_timeout(tmp_path):
    """Rank 0 loads while rank 1 raises: every rank learns it, the case ends, the job's load failed and the
    split is a symmetry FAIL (before, rank 0 waited for rank 1 in the fingerprint gather: UNKNOWN)."""
    backend = "tests.checkers.test_symmetry:load_fails_on_rank_one"
    result = run_case(load_text(SCENARIO), COMBO, str(tmp_path / "case"), backend=backend)
    verdict = next(v for v in result.verdicts if v.checker == "symmetry")
    assert verdict.status == FAIL, result.verdicts
    assert "returned on ranks [0] and raised on ranks [1]" in verdict.detail and "checksum" in verdict.detail
    assert result.verdict == "FAIL", result.detail


@pytest.mark.multiprocess
def test_a_rank_left_waiting_in_a_barrier_fails_with_its_stack(tmp_path):
    result = run_case(
        load_text(SCENARIO), COMBO, str(tmp_path / "case"), backend="tests.checkers.test_symmetry:raises_on_rank_one"
    )
    verdict = next(v for v in result.verdicts if v.checker == "symmetry")
    assert verdict.status == FAIL, result.verdicts
    assert "rank 1 raised RuntimeError: rank 1 gave up" in verdict.detail
    assert "rank 0 stayed blocked in" in verdict.detail
    assert "barrier" in verdict.evidence[0]["stacks"]  # the stack shows where it waited


@pytest.mark.multiprocess
def test_the_reference_fails_on_every_rank_alike(tmp_path):
    """LOCAL: rank 1's save raises, rank 0's returns (per-rank saves by design), no rank waits: PASS."""
    scenario = load_text(
        SCENARIO.replace("one-rank-raises", "enospc").replace(
            "{train: 1}, save, resume",
            "{train: 1}, {fault: {kind: io_error, errno: ENOSPC, rank: 1, op: write, nth: 1}}, save, resume",
        )
    )
    result = run_case(scenario, COMBO, str(tmp_path / "case"), backend="reference")
    verdict = next(v for v in result.verdicts if v.checker == "symmetry")
    assert verdict.status == PASS, result.verdicts
