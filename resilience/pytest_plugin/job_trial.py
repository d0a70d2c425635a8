"""The `resilience_job` fixture: a team's training command run under faults from a test, as
`resilience job` runs it, into the session's run folder.

    def test_my_training_survives_faults(resilience_job):
        resilience_job(["torchrun", "--nproc-per-node", "2", "train.py", "--ckpt-dir", "{ckpt}"])

Every selected column runs (a FAIL in one never hides the others), then one JobFailed lists each failing
column with its detail and replay command; the call returns the run (resilience.job.matrix.JobRun)."""

from __future__ import annotations

import os
import shlex
from collections.abc import Sequence

from ..errors import ResilienceError
from ..verdicts import FAILING


class JobFailed(ResilienceError, AssertionError):
    """Columns of a job trial that failed, each with its verdict, detail and replay command."""

    def __init__(self, command: str, rows: list, folder: str):
        self.rows, self.folder = rows, folder
        lines = [f"{len(rows)} column(s) of `{command}` failed (run folder {folder}):"]
        for r in rows:
            lines += [f"  {r.column}: {r.verdict}: {r.detail[:600]}", f"    replay: {r.replay}"]
        super().__init__("\n".join(lines))


class JobTrial:
    """`resilience_job(command, columns=None, **options)`: the golden run, then each column (None: every
    one), with the options of `resilience job` by keyword (ckpt_dir, nodes, metric, ack, resumed, rtol,
    max_restarts, restarts_by, max_states, timeout, golden_timeout, golden). Raises JobFailed on any verdict in
    `fail_on` (default: FAIL, UNKNOWN, UNPROBED, FLAKY)."""

    def __init__(self, run_dir: str):
        self.run_dir = run_dir

    def __call__(self, command: str | Sequence[str], columns: Sequence[str] | None = None, *, fail_on=None, **kw):
        __tracebackhide__ = True
        from ..job.command import JobCommand
        from ..job.matrix import run_job
        from ..job.options import JobOptions

        argv = shlex.split(command) if isinstance(command, str) else [str(a) for a in command]
        out = os.path.join(self.run_dir, "jobs")

        def texts(key: str) -> tuple[str, ...]:  # one pattern or several
            value = kw.pop(key, ())
            return (value,) if isinstance(value, str) else tuple(value)

        metric, ack, resumed = texts("metric"), texts("ack"), texts("resumed")
        options = JobOptions(
            JobCommand.parse(argv, ckpt_dir=kw.pop("ckpt_dir", None), out=out, nodes=kw.pop("nodes", 1)),
            metric,
            ack,
            resumed,
            out=out,
            columns=tuple(columns or ()),
            matrix=columns is None,
            **kw,
        )
        done = run_job(options)
        bad = [r for r in done.rows if r.verdict in (FAILING if fail_on is None else tuple(fail_on))]
        if bad:
            raise JobFailed(options.command.shell(), bad, done.folder)
        return done


__all__ = ["JobFailed", "JobTrial"]
