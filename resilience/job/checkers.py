"""The judges of a job case. Each reads the case's evidence (base.CaseEvidence: the golden curve, every
run's exit, output and what it said, what became of the fault), never the job, and PASSes only when the
case's fault fired: a fault that never fired leaves every checker UNPROBED (a hang is still a FAIL).

- resumed_newest: the restarted job resumed from the newest acknowledged checkpoint (or a newer one); an
  older one is a FAIL unless its output said why (then WARN); without ack lines, WARN (not judged);
- curve_equal: every step every run reported equals the golden curve (exactly, or within --rtol);
- no_silent_damage: after damage at rest the job trains as the golden run did, or refuses loudly
  (REFUSED); a curve that diverges is a FAIL, said or not;
- reached_end: the last run reported the last step and exited 0;
- no_hang: every run ended before its timeout; a hang's evidence is its process tree, and the Python
  stacks of the processes that asked for them (faulthandler on SIGUSR1);
- checkpoint_left: a restart after an acknowledged save loaded a checkpoint (resumed past step 0): the
  folder left keeps one that loads, judged by the job's own load;
- stops_on_sigterm: a job sent SIGTERM (the sigterm column) ends within the grace a scheduler gives it.
"""

from __future__ import annotations

import os
import re

from ..checkers.base import FAIL, NA, PASS, REFUSED, UNKNOWN, UNPROBED, WARN, Verdict
from .base import CaseEvidence, Point, RunOutcome
from .process import OUTPUT

# words a job uses when it says why it did not take its newest checkpoint
EXPLAINED = re.compile(
    r"(?i)(fall(?:ing)?\s*back|corrupt|damaged|invalid|mismatch|checksum|cannot load|failed to load|unreadable|"
    r"skipping|not valid|incomplete)"
)


ERROR_LINE = re.compile(r"\b\w*(?:Error|Exception)\b:")


def _mismatch(ev: CaseEvidence, runs: list[RunOutcome]) -> tuple[RunOutcome, Point] | None:
    for run in runs:
        for p in run.observed.points:
            if not ev.golden.same(p.loss, p.step):
                return run, p
    return None


def _evidence(ev: CaseEvidence, run: RunOutcome, p: Point) -> dict:
    return {
        "run": run.index,
        "step": p.step,
        "loss": _show(p.loss),
        "golden": _show(ev.golden.curve[p.step]) if p.step in ev.golden.curve else None,
        "line": p.line,
        "output": os.path.join(run.folder, OUTPUT),
    }


def _show(v: float) -> str:
    return repr(v)


def explained(run: RunOutcome) -> str | None:
    """The first line of a run's output saying why it did not take a checkpoint, if any."""
    try:
        with open(os.path.join(run.folder, OUTPUT), encoding="utf-8", errors="replace") as f:
            for line in f:
                if EXPLAINED.search(line):
                    return line.strip()[:300]
    except OSError:
        return None
    return None


def _error_line(run: RunOutcome) -> str:
    """What a run that ended badly said of it: its output's first line naming an error (the root cause, before
    any launcher's summary), else its last line with words in it (not a banner of '=')."""
    try:
        with open(os.path.join(run.folder, OUTPUT), encoding="utf-8", errors="replace") as f:
            for line in f:
                if ERROR_LINE.search(line):
                    return line.strip()[:300]
    except OSError:
        pass
    return next((line.strip()[:300] for line in reversed(run.observed.tail) if re.search(r"\w", line)), "")


def _refused_all(ev: CaseEvidence) -> RunOutcome | None:
    """The last restart, when every restart ended badly without training a step: a loud refusal."""
    if ev.restarts and all(not r.observed.points and r.exit_code not in (0, None) for r in ev.restarts):
        return ev.restarts[-1]
    return None


def _resumed(ev: CaseEvidence) -> tuple[RunOutcome, int, bool] | None:
    """The first restart that says where it resumed (or reports a step): (run, step, said)."""
    for r in ev.restarts:
        step, said = r.observed.resume_step()
        if step is not None:
            return r, step, said
    return None


def _acked(runs: list[RunOutcome], damaged: int | None) -> list[int]:
    return sorted({a.step for r in runs for a in r.observed.acks} - {damaged})


class ResumedNewest:
    """Every restart that says where it resumed, against the saves acknowledged before it (by any earlier
    run: a chained resume owes the save the first restart made)."""

    name = "resumed_newest"

    def check(self, ev: CaseEvidence) -> Verdict:
        if not ev.restarts:
            return Verdict(self.name, NA, f"the job never restarted: its first run ended with {ev.runs[0].ended()}")
        resumes: list[tuple[RunOutcome, int, bool]] = []
        for r in ev.restarts:
            step, said = r.observed.resume_step()
            if step is not None:
                resumes.append((r, step, said))
        if not resumes:
            return Verdict(self.name, NA, "no restarted run said where it resumed or reported a step")
        if not ev.golden.acks:
            _, step, said = resumes[0]
            return Verdict(
                self.name,
                WARN,
                f"resumed from step {step} ({_how(said)}); the job acknowledges no save (no ack line in the golden "
                "run: give --ack), so which checkpoint it should have resumed from is not judged",
            )
        facts, said_ok, warned = [], [], None
        for run, step, said in resumes:
            acked = [a for a in _acked(ev.runs[: run.index], None) if a != ev.fault.damaged_step]
            newest = max(acked, default=0)
            facts.append(
                {"run": run.index, "resumed": step, "how": _how(said), "acknowledged": acked, "expected": newest}
            )
            if step >= newest:
                more = "" if step == newest else f" (newer than the newest acknowledgement, step {newest})"
                if step == ev.fault.damaged_step:
                    more += ", the damaged one (judged by no_silent_damage)"
                said_ok.append(f"resumed from step {step} ({_how(said)}){more}")
                continue
            what = "started from scratch" if step == 0 else f"resumed from step {step} ({_how(said)})"
            prefix = f"run {run.index} " if len(resumes) > 1 else ""
            why = explained(run)
            if why is None:
                return Verdict(
                    self.name,
                    FAIL,
                    f"{prefix}{what}, older than the newest acknowledged checkpoint (step {newest}), without a word",
                    facts,
                )
            warned = warned or f"{prefix}{what}, older than the newest acknowledged step {newest}, and said why: {why}"
        if warned is not None:
            return Verdict(self.name, WARN, warned, facts)
        if len(said_ok) == 1:
            return Verdict(self.name, PASS, said_ok[0], facts)
        each = "; ".join(f"run {f['run']} {t}" for f, t in zip(facts, said_ok))
        return Verdict(self.name, PASS, f"{len(said_ok)} restarts, each from the newest acknowledged: {each}", facts)


def _how(said: bool) -> str:
    return "said" if said else "inferred from the first step it reported"


class CurveEqual:
    name = "curve_equal"

    def check(self, ev: CaseEvidence) -> Verdict:
        bad = _mismatch(ev, ev.runs)
        if bad is not None:
            run, p = bad
            want = ev.golden.curve.get(p.step)
            golden = "no such step" if want is None else f"loss {want!r}"
            return Verdict(
                self.name,
                FAIL,
                f"run {run.index} step {p.step}: loss {p.loss!r}, the golden run {golden}",
                [_evidence(ev, run, p)],
            )
        state = _state_mismatch(ev)
        if state is not None:
            return state
        after = sum(len(r.observed.points) for r in ev.restarts) if ev.restarts else len(ev.runs[0].observed.points)
        if not after:
            return Verdict(self.name, NA, "the job reported no step after the fault")
        how = "exactly" if not ev.golden.rtol else f"within --rtol {ev.golden.rtol:g}"
        states = sum(len(r.observed.digests()) for r in ev.runs)
        also = f", and {states} state digests equal the golden run's" if states and ev.golden.digests else ""
        return Verdict(
            self.name, PASS, f"every step reported ({after} after the fault) equals the golden curve {how}{also}"
        )


def _state_mismatch(ev: CaseEvidence) -> Verdict | None:
    """The first state digest (resilience.job.report) a run reported that differs from the golden run's."""
    for run in ev.runs:
        for (step, rank), got in sorted(run.observed.digests().items()):
            want = ev.golden.digests.get((step, rank))
            if want is not None and want != got:
                return Verdict(
                    CurveEqual.name,
                    FAIL,
                    f"run {run.index} step {step} rank {rank}: the state differs from the golden run's "
                    f"(digest {got[:12]}, the golden run {want[:12]}), whatever its loss",
                    [{"run": run.index, "step": step, "rank": rank, "digest": got, "golden": want}],
                )
    return None


class NoSilentDamage:
    name = "no_silent_damage"

    def check(self, ev: CaseEvidence) -> Verdict:
        if not ev.damage:
            return Verdict(self.name, NA, "no checkpoint was damaged in this column")
        why = next((w for w in (explained(r) for r in ev.restarts) if w), None)
        said = f"; it said: {why}" if why else "; it said nothing about it"
        bad = _mismatch(ev, ev.restarts)
        if bad is not None:
            run, p = bad
            return Verdict(
                self.name,
                FAIL,
                f"trained on the damaged checkpoint of step {ev.fault.damaged_step}: run {run.index} step {p.step} "
                f"loss {p.loss!r}, the golden run {ev.golden.curve.get(p.step)!r}{said}",
                [_evidence(ev, run, p)],
            )
        if any(r.observed.points for r in ev.restarts):
            found = _resumed(ev)
            where = f"resumed from step {found[1]}" if found else "resumed"
            return Verdict(self.name, PASS, f"{where} and trained as the golden run did{said}")
        refused = _refused_all(ev)
        if refused is not None:
            words = why or _error_line(refused)
            return Verdict(self.name, REFUSED, f"refused the damaged checkpoint loudly ({refused.ended()}): {words}")
        return Verdict(self.name, NA, "the job trained no step after the damage")


class ReachedEnd:
    name = "reached_end"

    def check(self, ev: CaseEvidence) -> Verdict:
        last, end = ev.runs[-1], ev.golden.last_step
        restarts = len(ev.restarts)
        resumed_at_end = last.observed.resume_step()[0] == end and not last.observed.points
        if last.exit_code == 0 and (last.observed.last_step == end or resumed_at_end):
            return Verdict(self.name, PASS, f"reached step {end} and exited 0 after {restarts} restart(s)")
        if ev.damage and _refused_all(ev) is not None:
            return Verdict(self.name, REFUSED, f"refused to go on from the damaged folder on {restarts} restart(s)")
        reached = max((r.observed.last_step or 0 for r in ev.runs), default=0)
        return Verdict(
            self.name,
            FAIL,
            f"the last run ({last.ended()}) stopped at step {last.observed.last_step or 0} of {end} after {restarts} "
            f"restart(s); the furthest any run got: step {reached}",
            [{"run": r.index, "ended": r.ended(), "last_step": r.observed.last_step} for r in ev.runs],
        )


class NoHang:
    name = "no_hang"

    def check(self, ev: CaseEvidence) -> Verdict:
        hung = [r for r in ev.runs if r.timed_out]
        if hung:
            r = hung[0]
            return Verdict(
                self.name,
                FAIL,
                f"run {r.index} did not end within {ev.timeout:g} s; {(r.hang or {}).get('stacks', '')}",
                [{"run": r.index, **(r.hang or {}), "last_lines": r.observed.tail[-10:]}],
            )
        return Verdict(self.name, PASS, f"every run ended within {ev.timeout:g} s")


class CheckpointLeft:
    name = "checkpoint_left"

    def check(self, ev: CaseEvidence) -> Verdict:
        if not ev.restarts:
            return Verdict(self.name, NA, "the job never restarted: no load shows what the folder keeps")
        # each restart against the saves acknowledged before it
        owed = [(r, _acked(ev.runs[: r.index], ev.fault.damaged_step)) for r in ev.restarts]
        owed = [(r, a) for r, a in owed if a]
        if not owed:
            return Verdict(self.name, NA, "no save was acknowledged before a restart: none is owed")
        acked = owed[-1][1]
        loaded = [(r.index, r.observed.resume_step()[0]) for r, _ in owed]
        good = [(i, s) for i, s in loaded if s is not None and s > 0]
        if good:
            i, s = good[-1]
            return Verdict(self.name, PASS, f"run {i} loaded the checkpoint of step {s} (acknowledged: {acked})")
        if ev.damage and _refused_all(ev) is not None:
            return Verdict(self.name, REFUSED, "every restart refused the damaged folder: no checkpoint was loaded")
        steps = ", ".join("none" if s is None else "scratch" if s == 0 else str(s) for _, s in loaded)
        return Verdict(
            self.name,
            FAIL,
            f"no acknowledged checkpoint loads: steps {acked} were acknowledged, "
            f"the restarted runs resumed from {steps}",
            [{"run": i, "resumed": s} for i, s in loaded],
        )


class StopsOnSigterm:
    """A preempted job (the sigterm column) ends within the grace a scheduler gives it after SIGTERM."""

    name = "stops_on_sigterm"

    def check(self, ev: CaseEvidence) -> Verdict:
        termed = [r for r in ev.runs if r.term_ignored is not None]
        if not termed:
            return Verdict(self.name, NA, "no run was sent SIGTERM")
        run = termed[0]
        left = list(run.term_ignored or ())
        if not left:
            return Verdict(self.name, PASS, f"every process of run {run.index} ended after SIGTERM ({run.ended()})")
        shown = "; ".join(
            f"pid {p.get('pid')} rank {p.get('rank')}: {str(p.get('cmdline', ''))[:120]}" for p in left[:4]
        )
        return Verdict(
            self.name,
            FAIL,
            f"{len(left)} process(es) of run {run.index} ignored SIGTERM through the grace and were SIGKILLed, as a "
            f"scheduler would kill them (a save in progress is lost): {shown}",
            left,
        )


ALL = (ResumedNewest(), CurveEqual(), NoSilentDamage(), ReachedEnd(), NoHang(), CheckpointLeft(), StopsOnSigterm())


def judge(ev: CaseEvidence, checkers=ALL) -> list[Verdict]:
    """Every checker's verdict; a crash is UNKNOWN; with a fault that never fired, UNPROBED (a FAIL of
    no_hang stays: a hang is a hang)."""
    out = []
    for c in checkers:
        try:
            v = c.check(ev)
        except Exception as e:  # a checker that crashed judged nothing
            v = Verdict(c.name, UNKNOWN, f"checker crashed: {type(e).__name__}: {e}")
        if not ev.fault.fired and not (v.status == FAIL and c.name == NoHang.name):
            v = Verdict(
                c.name, UNPROBED, f"its fault never fired: {ev.fault.detail} (would be: {v.status}: {v.detail})"
            )
        out.append(v)
    return out


__all__ = [
    "ALL",
    "CheckpointLeft",
    "CurveEqual",
    "NoHang",
    "NoSilentDamage",
    "ReachedEnd",
    "ResumedNewest",
    "StopsOnSigterm",
    "judge",
]
