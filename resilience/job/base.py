"""What a job's runs are made of, as records: what its output said (points of the metric curve,
acknowledged saves, where it resumed), one run of the command, and the evidence of a case that the
checkers read. Nothing here runs anything.

The flow of one case (resilience.job.case): the golden curve and layout (golden.py) aim the case's fault
(columns.py); the command runs under the mount (process.py), again and again as a scheduler restarts it
(schedule.py); the checkers (checkers.py) read a CaseEvidence and each gives a Verdict."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Protocol

from ..checkers.base import Verdict

FORMAT_VERSION = 1  # of what a golden run keeps (curve.json, layout.json), read back by --golden


def readable(doc: object) -> None:
    """Refuse a kept document that is not an object of the format version this one reads (ValueError)."""
    version = doc.get("format_version") if isinstance(doc, dict) else None
    if version != FORMAT_VERSION:
        raise ValueError(f"format_version {str(version)[:40]!r}, this version reads {FORMAT_VERSION}")


@dataclass(frozen=True)
class Point:
    """One point of the metric curve: the step, its loss, the other named groups of the pattern, and the
    line of the run's output it came from (1-based)."""

    step: int
    loss: float
    line: int = 0
    extra: tuple[tuple[str, str], ...] = ()

    def to_dict(self) -> dict:
        return {"step": self.step, "loss": _num(self.loss), "line": self.line, **dict(self.extra)}


@dataclass(frozen=True)
class Said:
    """An acknowledged save or a resume point the job printed: its step and the line (1-based, and text)."""

    step: int
    line: int = 0
    text: str = ""

    def to_dict(self) -> dict:
        return {"step": self.step, "line": self.line, "text": self.text}


@dataclass
class Observed:
    """What one run's output said, in order: metric points, acknowledged saves, the resume point."""

    points: list[Point] = field(default_factory=list)
    acks: list[Said] = field(default_factory=list)
    resumed: Said | None = None
    lines: int = 0
    head: list[str] = field(default_factory=list)  # the first lines, for errors that show them
    tail: list[str] = field(default_factory=list)  # the last lines, for the evidence of a failure

    def curve(self) -> dict[int, float]:
        """step -> loss, the first report of each step (several ranks may print the same line)."""
        out: dict[int, float] = {}
        for p in self.points:
            out.setdefault(p.step, p.loss)
        return out

    def digests(self) -> dict[tuple[int, int], str]:
        """(step, rank) -> the state's digest, from the lines resilience.job.report printed (first of each)."""
        out: dict[tuple[int, int], str] = {}
        for p in self.points:
            extra = dict(p.extra)
            if extra.get("digest", "-") != "-" and str(extra.get("rank", "")).isdigit():
                out.setdefault((p.step, int(extra["rank"])), extra["digest"])
        return out

    @property
    def last_step(self) -> int | None:
        return max((p.step for p in self.points), default=None)

    def resume_step(self) -> tuple[int | None, bool]:
        """(step it resumed from, said): the resume line's step, else the step before the first one it
        reported (said False: inferred, exact when the job reports every step); None when it reported none."""
        if self.resumed is not None:
            return self.resumed.step, True
        if self.points:
            return self.points[0].step - 1, False
        return None, False

    def to_dict(self) -> dict:
        return {
            "points": [p.to_dict() for p in self.points],
            "acks": [a.to_dict() for a in self.acks],
            "resumed": self.resumed.to_dict() if self.resumed else None,
            "lines": self.lines,
        }


@dataclass(frozen=True)
class RunOutcome:
    """One run of the command: how it ended (exit status, or a signal as a negative number, None if it
    never ended by itself), how long it took, what it said, and where its files are."""

    index: int  # 0: the first run of a case (the one the fault is aimed at); 1, 2, ...: restarts
    folder: str
    exit_code: int | None
    seconds: float
    observed: Observed
    timed_out: bool = False
    killed: str | None = None  # why the runner killed the whole job ("mid-save", "between saves", "timeout")
    killed_at: int | None = None  # time.monotonic_ns() of that kill (the file system's log clock)
    hang: dict | None = None  # the process tree (and where its Python stacks went) of a run that timed out
    firings: tuple[dict, ...] = ()  # what the mount's fault records did (faults.firings)
    term_ignored: tuple[dict, ...] | None = None  # after a SIGTERM: the processes still there after the grace
    node_kill: dict | None = None  # with --nodes: the node killed, and what became of the others
    restarted_by: str | None = None  # "torchrun": this group of workers failed and its agent restarted them

    @property
    def ok(self) -> bool:
        return self.exit_code == 0 and not self.timed_out

    def ended(self) -> str:
        """How it ended, in words."""
        if self.timed_out:
            return f"timed out after {self.seconds:.1f} s"
        if self.restarted_by:
            how = f"killed by the runner ({self.killed})" if self.killed else f"a worker failed ({self.exit_code})"
            return f"{how}; {self.restarted_by} restarted its workers"
        if self.killed:
            return f"killed by the runner ({self.killed})"
        if self.exit_code is not None and self.exit_code < 0:
            return f"ended by signal {-self.exit_code}"
        return f"exit {self.exit_code}"

    def to_dict(self) -> dict:
        return {
            "index": self.index,
            "folder": self.folder,
            "exit_code": self.exit_code,
            "seconds": round(self.seconds, 3),
            "timed_out": self.timed_out,
            "killed": self.killed,
            "hang": self.hang,
            "firings": list(self.firings),
            "term_ignored": None if self.term_ignored is None else list(self.term_ignored),
            "node_kill": self.node_kill,
            "restarted_by": self.restarted_by,
            "observed": self.observed.to_dict(),
        }


@dataclass(frozen=True)
class Golden:
    """The reference: the curve of a run that never stopped, the saves it acknowledged, its last step,
    the tolerance curves are compared with (0: exact), and how long each golden run took."""

    curve: dict[int, float]
    acks: tuple[int, ...]
    last_step: int
    rtol: float = 0.0
    seconds: tuple[float, ...] = ()
    digests: dict[tuple[int, int], str] = field(default_factory=dict)  # (step, rank) -> state digest (hook.py)
    nodes: int = 1  # the nodes (launchers) each run started: --nodes

    def same(self, got: float, step: int) -> bool:
        want = self.curve.get(step)
        if want is None:
            return False
        if math.isnan(want) or math.isnan(got):
            return math.isnan(want) and math.isnan(got)
        return got == want or (self.rtol > 0 and math.isclose(got, want, rel_tol=self.rtol, abs_tol=0.0))

    def to_dict(self) -> dict:
        return {
            "format_version": FORMAT_VERSION,
            "curve": {str(k): _num(v) for k, v in sorted(self.curve.items())},
            "acks": list(self.acks),
            "last_step": self.last_step,
            "rtol": self.rtol,
            "seconds": [round(s, 3) for s in self.seconds],
            "digests": {f"{step}:{rank}": d for (step, rank), d in sorted(self.digests.items())},
            "nodes": self.nodes,
        }

    @classmethod
    def from_dict(cls, d: dict) -> Golden:
        readable(d)
        return cls(
            {int(k): float(v) for k, v in d["curve"].items()},
            tuple(int(a) for a in d.get("acks") or ()),
            int(d["last_step"]),
            float(d.get("rtol") or 0.0),
            tuple(float(s) for s in d.get("seconds") or ()),
            {_step_rank(k): str(v) for k, v in (d.get("digests") or {}).items()},
            int(d.get("nodes") or 1),
        )


def _step_rank(key: str) -> tuple[int, int]:
    step, rank = key.split(":")
    return int(step), int(rank)


@dataclass(frozen=True)
class FaultState:
    """What became of a case's fault: fired (with what it did), never fired, or not applicable (why)."""

    status: str  # checkers.case.FIRED, NEVER_FIRED or NOT_APPLICABLE
    detail: str
    run: int = 0  # the run it was aimed at
    damaged_step: int | None = None  # damage at rest: the step of the checkpoint it damaged
    record: dict = field(default_factory=dict)

    @property
    def fired(self) -> bool:
        from ..checkers.case import FIRED

        return self.status == FIRED


@dataclass
class CaseEvidence:
    """Everything a checker of a job reads: the column, the golden reference, every run of the case, what
    became of its fault, and the run timeout."""

    column: str
    golden: Golden
    runs: list[RunOutcome]
    fault: FaultState
    timeout: float
    damage: bool = False  # the column damages a checkpoint at rest before the restart

    @property
    def restarts(self) -> list[RunOutcome]:
        return self.runs[1:]

    def acked_before_restart(self) -> list[int]:
        """Steps acknowledged by the run the fault struck, before it ended."""
        return sorted({a.step for a in self.runs[0].observed.acks}) if self.runs else []


class JobChecker(Protocol):
    """A judge of one job case: reads the evidence only, never the job."""

    name: str

    def check(self, ev: CaseEvidence) -> Verdict: ...


def _num(v: float) -> float | str:
    return v if math.isfinite(v) else str(v)


__all__ = ["CaseEvidence", "FaultState", "Golden", "JobChecker", "Observed", "Point", "RunOutcome", "Said"]
