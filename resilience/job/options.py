"""The options of one `resilience job` run, read once from the command line, and the replay command of
one of its cases."""

from __future__ import annotations

import shlex
from dataclasses import dataclass

from ..errors import ConfigError
from .base import Golden
from .command import JobCommand
from .patterns import Patterns

MAX_RESTARTS = 3  # restarts a scheduler allows by default
RUNNER, TORCHRUN = "runner", "torchrun"  # --restarts-by
TERM_GRACE = 10.0  # seconds a preempted job has after SIGTERM, as a scheduler gives (SLURM's KillWait: 30)
MAX_STATES = 4  # crash states of a power loss restarted on by default (each one a restart of the job)
GOLDEN_TIMEOUT = 900.0  # seconds for one golden run by default
TIMEOUT_FACTOR = 3.0  # a case's run may take this many times the slower golden run ...
MIN_TIMEOUT = 30.0  # ... and at least this many seconds, before it counts as a hang


@dataclass(frozen=True)
class JobOptions:
    command: JobCommand
    metric: tuple[str, ...] = ()
    ack: tuple[str, ...] = ()
    resumed: tuple[str, ...] = ()
    rtol: float = 0.0
    max_restarts: int = MAX_RESTARTS
    timeout: float | None = None  # one run of a case; None: from the golden run's wall time
    golden_timeout: float = GOLDEN_TIMEOUT
    out: str = "runs"
    columns: tuple[str, ...] = ()  # the columns to run; empty: none (the golden run only) unless matrix
    matrix: bool = False
    golden: str | None = None  # a golden run kept by an earlier run, reused
    max_states: int = MAX_STATES  # crash states the power-loss column restarts on
    term_grace: float = TERM_GRACE  # seconds a job sent SIGTERM has before it is SIGKILLed
    restarts_by: str = RUNNER  # who restarts the job after a fault: the runner, or torchrun's own agent

    def __post_init__(self) -> None:
        if self.restarts_by not in (RUNNER, TORCHRUN):
            raise ConfigError("--restarts-by", f"{self.restarts_by!r} restarts nothing", f"give {RUNNER} or {TORCHRUN}")
        if self.restarts_by == TORCHRUN and not self.command.is_torchrun:
            raise ConfigError(
                "--restarts-by",
                f"torchrun restarts only a job it launches, and {self.command.argv[0]!r} is not torchrun",
                "start the job with torchrun (or python -m torch.distributed.run), or leave --restarts-by out",
            )
        if self.restarts_by == TORCHRUN and self.command.nodes > 1:
            raise ConfigError("--restarts-by", "torchrun's own restarts are not followed across --nodes", "give one")

    def patterns(self) -> Patterns:
        return Patterns.from_options(self.metric or None, self.ack or None, self.resumed or None)

    def run_timeout(self, golden: Golden) -> float:
        if self.timeout is not None:
            return self.timeout
        return max(MIN_TIMEOUT, TIMEOUT_FACTOR * max(golden.seconds, default=MIN_TIMEOUT))

    def replay(self, column: str, golden_dir: str) -> str:
        """The command that runs one case again, against this run's golden run."""
        parts = ["resilience", "job", "--column", column, "--golden", golden_dir]
        for flag, values in (("--metric", self.metric), ("--ack", self.ack), ("--resumed", self.resumed)):
            for v in values:
                parts += [flag, v]
        if self.rtol:
            parts += ["--rtol", f"{self.rtol:g}"]
        if self.max_restarts != MAX_RESTARTS:
            parts += ["--max-restarts", str(self.max_restarts)]
        if self.command.nodes > 1:
            parts += ["--nodes", str(self.command.nodes)]
        if self.restarts_by != RUNNER:
            parts += ["--restarts-by", self.restarts_by]
        if self.term_grace != TERM_GRACE and column.partition("@")[0] in ("sigterm", "node-kill"):
            parts += ["--term-grace", f"{self.term_grace:g}"]
        if self.max_states != MAX_STATES and column.partition("@")[0] == "power-loss":
            parts += ["--max-states", str(self.max_states)]
        if self.timeout is not None:
            parts += ["--timeout", f"{self.timeout:g}"]
        if self.command.ckpt_dir:
            parts += ["--ckpt-dir", self.command.ckpt_dir]
        if self.out != "runs":
            parts += ["--out", self.out]
        return " ".join(shlex.quote(p) for p in parts) + " -- " + self.command.shell()


__all__ = ["GOLDEN_TIMEOUT", "MAX_RESTARTS", "MAX_STATES", "RUNNER", "TORCHRUN", "JobOptions"]
