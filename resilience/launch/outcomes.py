"""What a rank function receives, what comes back from each rank and from a job, and the bounds of a
job's timeout."""

from __future__ import annotations

import math
import signal as _signal
from dataclasses import dataclass, field
from typing import Any

from ..errors import ConfigError

MAX_JOB_TIMEOUT = 3600.0  # seconds: the ceiling on any job's timeout, so that every run ends


def check_seconds(name: str, value) -> float:
    """A job timeout as a float: a finite positive number of seconds, at most MAX_JOB_TIMEOUT."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ConfigError(name, f"must be a number of seconds, got {value!r}")
    if not math.isfinite(value) or value <= 0:
        raise ConfigError(name, f"must be a finite positive number of seconds, got {value!r}")
    if value > MAX_JOB_TIMEOUT:
        raise ConfigError(
            name, f"{value:g} s is above the ceiling of {MAX_JOB_TIMEOUT:g} s", f"use at most {MAX_JOB_TIMEOUT:g}"
        )
    return float(value)


@dataclass(frozen=True)
class RankContext:
    """Given to the function run on every rank, after torch.distributed is initialised."""

    rank: int
    world: int
    pid: int


@dataclass
class RankOutcome:
    """How one rank ended: ok (with result), error (with traceback), signal, exit, torn_down, timeout,
    stopped (SIGSTOPped and never continued until the job ended; then killed), or blocked (still running
    a while after another rank raised). A blocked or timed-out rank's `stacks` hold its Python stacks,
    taken before it was killed (when the job keeps logs)."""

    rank: int
    status: str = "running"
    result: Any = None
    error: str = ""
    traceback: str = ""
    signal: int | None = None
    exitcode: int | None = None
    seconds: float = 0.0
    stacks: str = ""

    @property
    def ok(self) -> bool:
        return self.status == "ok"

    def describe(self) -> str:
        if self.status == "error":
            return f"{self.error}\n{self.traceback}".rstrip()
        if self.status == "signal":
            name = _signal.Signals(self.signal).name if self.signal else "?"
            return f"killed by signal {self.signal} ({name})"
        if self.status == "exit":
            return f"exited with status {self.exitcode} without reporting a result"
        if self.status == "torn_down":
            return "torn down after another rank failed"
        if self.status == "timeout":
            return self.error or "still running when the timeout expired; killed"
        if self.status == "stopped":
            return self.error or "stopped (SIGSTOP) and never continued; killed"
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
    def killed(self) -> bool:
        """Whether a rank ended by a signal (its peers' errors and waits follow from it)."""
        return any(o.status == "signal" for o in self.outcomes)

    @property
    def results(self) -> list:
        return [o.result for o in self.outcomes]

    @property
    def failures(self) -> dict[int, str]:
        return {o.rank: o.describe() for o in self.outcomes if not o.ok}

    def first_failure(self) -> RankOutcome | None:
        """The rank whose failure started the teardown (a rank stopped for good first: the others' waits
        and timeouts follow from it; then signal, error, by rank)."""
        for status in ("stopped", "signal", "error", "exit", "timeout"):
            for o in self.outcomes:
                if o.status == status:
                    return o
        return None
