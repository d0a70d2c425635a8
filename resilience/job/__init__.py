"""`resilience job`: a team's unmodified training command, run as a black box under faults.

The command runs with the fault-injecting file system mounted at its checkpoint folder (ranks read from
torchrun's RANK), is observed through its output lines (metric curve, acknowledged saves, resume point),
killed and restarted as a scheduler would, and judged against a golden run that never stopped. One module
per concern: command, patterns, process and tree (one run), golden, layout, columns, damage, schedule,
checkers, case, matrix (the run), hook (the optional line a job may print: `resilience.job.report`);
docs/job.md says what each column and checker does."""

from .hook import report, state_digest

__all__ = ["report", "state_digest"]
