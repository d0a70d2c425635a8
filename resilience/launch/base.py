"""What a rank function receives and what comes back from each rank."""
from __future__ import annotations

import signal as _signal
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class RankContext:
    """Given to the function run on every rank, after torch.distributed is initialised."""

    rank: int
    world: int
    pid: int


@dataclass
class RankOutcome:
    """How one rank ended: ok (with result), error (with traceback), signal, exit, torn_down, timeout."""

    rank: int
    status: str = "running"
    result: Any = None
    error: str = ""
    traceback: str = ""
    signal: int | None = None
    exitcode: int | None = None
    seconds: float = 0.0

    @property
    def ok(self) -> bool:
        return self.status == "ok"

    def describe(self) -> str:
        if self.status == "error":
            return f"{self.error}\n{self.traceback}".rstrip()
        if self.status == "signal":
            return f"killed by signal {self.signal} ({_signal.Signals(self.signal).name})"
        if self.status == "exit":
            return f"exited with status {self.exitcode} without reporting a result"
        if self.status == "torn_down":
            return "torn down after another rank failed"
        if self.status == "timeout":
            return "still running when the timeout expired; stopped"
        return self.status


@dataclass
class JobOutcome:
    outcomes: list[RankOutcome] = field(default_factory=list)
    timed_out: bool = False
    seconds: float = 0.0

    @property
    def ok(self) -> bool:
        return all(o.ok for o in self.outcomes)

    @property
    def results(self) -> list:
        return [o.result for o in self.outcomes]

    @property
    def failures(self) -> dict[int, str]:
        return {o.rank: o.describe() for o in self.outcomes if not o.ok}

    def first_failure(self) -> RankOutcome | None:
        """The rank whose failure started the teardown (error or signal first, by rank)."""
        for status in ("signal", "error", "exit", "timeout"):
            for o in self.outcomes:
                if o.status == status:
                    return o
        return None
