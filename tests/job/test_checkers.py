"""Each checker of a job case on hand-written evidence: the runs' output lines as a job prints them, the
golden curve, and what became of the fault. Every checker PASSes only on a fault that fired and has a
row where it FAILs."""

import pytest

from resilience.checkers.case import FIRED, NEVER_FIRED
from resilience.job.base import CaseEvidence, FaultState, Golden, RunOutcome
from resilience.job.checkers import (
    CheckpointLeft,
    CurveEqual,
    NoHang,
    NoSilentDamage,
    ReachedEnd,
    ResumedNewest,
    StopsOnSigterm,
    judge,
)
from resilience.job.patterns import Patterns, read_lines
from resilience.verdicts import FAIL, NA, PASS, REFUSED, UNPROBED, WARN

PATTERNS = Patterns.from_options()


def loss(step: int) -> float:
    return round(1.0 / step, 6)


GOLDEN = Golden({s: loss(s) for s in range(1, 13)}, (4, 8, 12), 12)


def steps(a: int, b: int, *, off: int | None = None) -> list[str]:
    """The metric lines of steps a..b; step `off` reports a wrong loss."""
    return [f"step {s} loss {loss(s) + (1.0 if s == off else 0.0):.6f}" for s in range(a, b + 1)]


def acks(*at: int) -> list[str]:
    return [f"saved checkpoint step {s}" for s in at]


class Case:
    def __init__(self, tmp_path):
        self.tmp = tmp_path
        self.runs: list[RunOutcome] = []

    def run(self, lines, code=0, *, timed_out=False):
        folder = self.tmp / f"run-{len(self.runs)}"
        folder.mkdir(parents=True)
        (folder / "output.log").write_text("\n".join(lines) + "\n")
        obs = read_lines(PATTERNS, lines)
        hang = {"processes": [{"pid": 1, "state": "S (sleeping)"}], "stacks": "its process tree only"}
        self.runs.append(
            RunOutcome(
                len(self.runs),
                str(folder),
                None if timed_out else code,
                1.0,
                obs,
                timed_out=timed_out,
                hang=hang if timed_out else None,
            )
        )
        return self

    def evidence(self, *, fired=True, damaged=None, golden=GOLDEN):
        state = FaultState(FIRED if fired else NEVER_FIRED, "it fired" if fired else "its trigger never came")
        if damaged is not None:
            state = FaultState(FIRED, "damaged", damaged_step=damaged)
        return CaseEvidence("col", golden, self.runs, state, 30.0, damage=damaged is not None)


def first_run_killed_after_8(case):
    return case.run(steps(1, 4) + acks(4) + steps(5, 8) + acks(8) + steps(9, 10), -9)


def test_resumed_newest(tmp_path):
    c = first_run_killed_after_8(Case(tmp_path / "a")).run(["resumed from step 8", *steps(9, 12), *acks(12)])
    assert ResumedNewest().check(c.evidence()).status == PASS
    scratch = first_run_killed_after_8(Case(tmp_path / "b")).run(steps(1, 12) + acks(4, 8, 12))
    v = ResumedNewest().check(scratch.evidence())
    assert v.status == FAIL and "started from scratch" in v.detail and "step 8" in v.detail
    said = first_run_killed_after_8(Case(tmp_path / "c")).run(
        ["iter_8/rank_0.pt: checksum mismatch, falling back", "resumed from step 4", *steps(5, 12)]
    )
    v = ResumedNewest().check(said.evidence())
    assert v.status == WARN and "said why" in v.detail
    damaged = first_run_killed_after_8(Case(tmp_path / "d")).run(["resumed from step 4", *steps(5, 12)])
    assert ResumedNewest().check(damaged.evidence(damaged=8)).status == PASS  # the newest undamaged one
    none = Case(tmp_path / "e").run(steps(1, 12))
    assert ResumedNewest().check(none.evidence()).status == NA
    no_acks = Golden(GOLDEN.curve, (), 12)
    silent = Case(tmp_path / "f").run(steps(1, 10), -9).run(steps(9, 12))
    v = ResumedNewest().check(silent.evidence(golden=no_acks))
    assert v.status == WARN and "--ack" in v.detail


def test_resumed_newest_judges_every_restart_of_a_chained_resume(tmp_path):
    def chained(name, second):
        c = Case(tmp_path / name).run(steps(1, 4) + acks(4) + steps(5, 6), -9)
        return c.run(["resumed from step 4", *steps(5, 8), *acks(8), *steps(9, 10)], -9).run(second)

    good = chained("a", ["resumed from step 8", *steps(9, 12), *acks(12)])
    v = ResumedNewest().check(good.evidence())
    assert v.status == PASS and "run 1 resumed from step 4" in v.detail and "run 2 resumed from step 8" in v.detail
    # the second restart takes the first checkpoint again: the save the first restart made is owed
    v = ResumedNewest().check(chained("b", ["resumed from step 4", *steps(5, 12)]).evidence())
    assert v.status == FAIL and v.detail.startswith("run 2 resumed from step 4") and "(step 8)" in v.detail, v.detail


def test_curve_equal(tmp_path):
    good = first_run_killed_after_8(Case(tmp_path / "a")).run(["resumed from step 8", *steps(9, 12)])
    assert CurveEqual().check(good.evidence()).status == PASS
    bad = first_run_killed_after_8(Case(tmp_path / "b")).run(["resumed from step 8", *steps(9, 12, off=10)])
    v = CurveEqual().check(bad.evidence())
    assert v.status == FAIL and "run 1 step 10: loss 1.1" in v.detail and "the golden run loss 0.1" in v.detail
    assert v.evidence[0]["step"] == 10 and v.evidence[0]["golden"] == "0.1"
    tolerant = Golden(GOLDEN.curve, GOLDEN.acks, 12, rtol=20.0)
    assert CurveEqual().check(bad.evidence(golden=tolerant)).status == PASS


def test_no_silent_damage(tmp_path):
    diverged = first_run_killed_after_8(Case(tmp_path / "a")).run(["resumed from step 8", *steps(9, 12, off=9)])
    v = NoSilentDamage().check(diverged.evidence(damaged=8))
    assert v.status == FAIL and "trained on the damaged checkpoint of step 8" in v.detail
    fell_back = first_run_killed_after_8(Case(tmp_path / "b")).run(
        ["falling back", "resumed from step 4", *steps(5, 12)]
    )
    assert NoSilentDamage().check(fell_back.evidence(damaged=8)).status == PASS
    refused = first_run_killed_after_8(Case(tmp_path / "c")).run(["ValueError: CRC mismatch"], 1).run(["x"], 1)
    assert NoSilentDamage().check(refused.evidence(damaged=8)).status == REFUSED
    assert NoSilentDamage().check(fell_back.evidence()).status == NA  # nothing was damaged


def test_reached_end(tmp_path):
    good = first_run_killed_after_8(Case(tmp_path / "a")).run(["resumed from step 8", *steps(9, 12)])
    assert ReachedEnd().check(good.evidence()).status == PASS
    early = first_run_killed_after_8(Case(tmp_path / "b")).run(["resumed from step 8", *steps(9, 10)])
    v = ReachedEnd().check(early.evidence())
    assert v.status == FAIL and "stopped at step 10 of 12" in v.detail
    refused = first_run_killed_after_8(Case(tmp_path / "c")).run(["ValueError: CRC mismatch"], 1)
    assert ReachedEnd().check(refused.evidence(damaged=8)).status == REFUSED
    assert ReachedEnd().check(refused.evidence()).status == FAIL  # a job that never gets back up, undamaged


def test_no_hang(tmp_path):
    hung = first_run_killed_after_8(Case(tmp_path / "a")).run(["resumed from step 8"], timed_out=True)
    v = NoHang().check(hung.evidence())
    assert v.status == FAIL and "run 1 did not end within 30 s" in v.detail and v.evidence[0]["processes"]
    good = first_run_killed_after_8(Case(tmp_path / "b")).run(["resumed from step 8", *steps(9, 12)])
    assert NoHang().check(good.evidence()).status == PASS


def test_checkpoint_left(tmp_path):
    good = first_run_killed_after_8(Case(tmp_path / "a")).run(["resumed from step 4", *steps(5, 12)])
    assert CheckpointLeft().check(good.evidence()).status == PASS
    lost = first_run_killed_after_8(Case(tmp_path / "b")).run(steps(1, 12) + acks(4, 8, 12))
    v = CheckpointLeft().check(lost.evidence())
    assert v.status == FAIL and "steps [4, 8] were acknowledged" in v.detail and "scratch" in v.detail
    nothing_owed = Case(tmp_path / "c").run(steps(1, 3), -9).run(steps(1, 12))
    assert CheckpointLeft().check(nothing_owed.evidence()).status == NA


def test_a_fault_that_never_fired_leaves_every_checker_unprobed_but_a_hang_fails(tmp_path):
    good = first_run_killed_after_8(Case(tmp_path / "a")).run(["resumed from step 8", *steps(9, 12)])
    assert {v.status for v in judge(good.evidence(fired=False))} == {UNPROBED}
    hung = first_run_killed_after_8(Case(tmp_path / "b")).run(["resumed from step 8"], timed_out=True)
    verdicts = {v.checker: v.status for v in judge(hung.evidence(fired=False))}
    assert verdicts.pop("no_hang") == FAIL and set(verdicts.values()) == {UNPROBED}


@pytest.mark.parametrize("checker", [ResumedNewest(), CurveEqual(), ReachedEnd(), NoHang(), CheckpointLeft()])
def test_every_checker_passes_a_clean_resume(tmp_path, checker):
    good = first_run_killed_after_8(Case(tmp_path)).run(["resumed from step 8", *steps(9, 12), *acks(12)])
    assert checker.check(good.evidence()).status == PASS


def test_stops_on_sigterm(tmp_path):
    from dataclasses import replace

    c = first_run_killed_after_8(Case(tmp_path / "a")).run(["resumed from step 8", *steps(9, 12)])
    assert StopsOnSigterm().check(c.evidence()).status == NA  # nobody was sent SIGTERM
    c.runs[0] = replace(c.runs[0], term_ignored=())
    assert StopsOnSigterm().check(c.evidence()).status == PASS
    c.runs[0] = replace(c.runs[0], term_ignored=({"pid": 7, "rank": 1, "cmdline": "python train.py"},))
    v = StopsOnSigterm().check(c.evidence())
    assert v.status == FAIL and "pid 7 rank 1: python train.py" in v.detail
