"""Run cases into a run folder, one by one or a few at a time in worker processes: each finished case's
row is appended at once, a framework error in one case is that case's UNKNOWN (traceback in its folder)
and the run goes on, and an interruption (Ctrl-C, SIGTERM) still writes the reports for the cases that
finished."""

from __future__ import annotations

import os
import signal
import sys
import time
import traceback
from collections.abc import Callable, Iterable
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

from ..errors import Interrupted
from ..report.folder import INTERRUPTED, RunFolder
from ..report.matrix_table import FRAMEWORK, FRAMEWORK_ERROR
from ..report.result_row import ResultRow
from ..stopping import check as check_stop, deferred

if TYPE_CHECKING:
    from .adapters import BackendName

INTERRUPTIONS = (KeyboardInterrupt, Interrupted)


def create_run_folder(base: str, name: str, meta: dict) -> RunFolder:
    """A new run folder (RunFolder.create), the mounts of the fault-injecting file system that a killed
    run left (their server gone) cleared first."""
    if sys.platform.startswith("linux"):
        from ..fusefs.mounts import clean_stale_mounts

        clean_stale_mounts("/")
    return RunFolder.create(base, name, meta)


@dataclass(frozen=True)
class CaseSpec:
    """One case of a run, as case_row takes it; `extra` goes into its row (column, broken, ...)."""

    scenario: Any
    combo: Any
    case_dir: str
    backend: BackendName  # the run's, resolved once (runner.adapters.BackendRef), or a name run_case resolves
    fault_column: str | None = None
    transition: str | None = None
    extra: dict = field(default_factory=dict)
    io: str | None = None  # the way in-process faults reach the backend (runner.io_route); None: auto

    def __str__(self) -> str:
        """What a progress line calls the case: its combination and column (or scenario)."""
        return f"{self.combo} {self.extra.get('column') or self.fault_column or self.transition or self.scenario.name}"

    @property
    def backend_spec(self) -> str:
        """The backend as a scenario file and a replay name it."""
        return str(self.backend or self.scenario.backend)


def judge_cases(
    folder: RunFolder,
    cases: Iterable[CaseSpec],
    *,
    columns: list[str] | None = None,
    after: Callable[[ResultRow], None] | None = None,
    before: Callable[[CaseSpec], None] | None = None,
    workers: int = 1,
    repeat: int = 1,
) -> list[ResultRow]:
    """Judge every case into `folder` (case_row), `workers` at a time (launch.workers: processes forked
    from this one; 1: one by one, here), calling `before(case)` as each run starts and `after(row)` as each
    case ends (a progress bar); an interruption keeps the folder for the rows so far (keeping). `repeat`:
    runs of each case with the same seed, each in its own folder (runner.repeats), side by side with
    workers, and one row for them all once the last ends. The rows, in the cases' order; finishing is the
    caller's."""
    from ..launch.workers import run_each
    from .adapters import preload
    from .learn import sharing_layouts
    from .repeats import repeated_row, repetition_dir

    specs = list(cases)
    # each run of a case: (index of its case, its spec); a case run once keeps its own folder
    runs = [
        (i, s if repeat == 1 else replace(s, case_dir=repetition_dir(s.case_dir, k + 1)))
        for i, s in enumerate(specs)
        for k in range(repeat)
    ]
    forked = workers > 1 and len(runs) > 1  # run_each forks workers only then
    if forked:  # imported once here, not once in every worker
        preload((s.backend or s.scenario.backend, s.combo) for s in specs)
    rows: list[ResultRow | None] = [None] * len(specs)
    ended: dict[int, dict[int, ResultRow]] = {}  # the runs of each case that ended, by their place in `runs`
    with keeping(folder, columns), sharing_layouts(forked, under=folder.path):
        started = (lambda j: before(runs[j][1])) if before is not None else None
        run_specs = [r for _, r in runs]
        for j, out in run_each(case_row, run_specs, workers, started=started, order=_longest_first(run_specs)):
            i = runs[j][0]
            ended.setdefault(i, {})[j] = out if isinstance(out, ResultRow) else _lost_row(runs[j][1], out)
            if len(ended[i]) < repeat:
                continue
            _, row = repeated_row([r for _, r in sorted(ended.pop(i).items())])
            folder.append(row)
            rows[i] = row
            if after is not None:
                after(row)
    return [r for r in rows if r is not None]


def _longest_first(specs: list[CaseSpec]) -> list[int]:
    """The cases' indices, those likely to take longest first: a power loss (its crash states, each loaded
    by the ranks), then by number of steps; ties keep their order."""

    def cost(i: int) -> tuple:
        steps = getattr(specs[i].scenario, "steps", [])
        return (-any(s.kind == "lose_unsynced" for s in steps), -len(steps), i)

    return sorted(range(len(specs)), key=cost)


@dataclass(frozen=True)
class Judged:
    """One case judged: its row, and run_case's result (None, with the error, when the framework broke)."""

    row: ResultRow
    result: Any = None  # runner.run.CaseResult
    error: Exception | None = None


def judge_case(c: CaseSpec) -> Judged:
    """run_case on one case, its row with the extra keys (column, ...) in it; not yet appended to a run
    folder. A framework error is the case's UNKNOWN row, never an abort of the run (the pytest plugin
    raises it as its own failure)."""
    from .run import run_case

    check_stop()
    start = time.monotonic()
    try:
        result = run_case(
            c.scenario,
            c.combo,
            c.case_dir,
            backend=c.backend,
            fault_column=c.fault_column,
            transition=c.transition,
            io=c.io,
        )
    except INTERRUPTIONS:
        raise
    except Exception as e:  # the framework broke on this case: UNKNOWN for it
        return Judged(_lost_row(c, e, time.monotonic() - start), None, e)
    return Judged(result.to_row().with_extra(**c.extra), result)


def case_row(c: CaseSpec) -> ResultRow:
    """judge_case's row of one case, its timeline drawn (a worker's part) from the events run_case read."""
    judged = judge_case(c)
    # the history run_case read: the timeline draws it without reading history.jsonl again
    _draw_timeline(c.case_dir, judged.result.history if judged.result is not None else None)
    return judged.row


def _lost_row(c: CaseSpec, error: BaseException, seconds: float = 0.0) -> ResultRow:
    """The UNKNOWN row of a case the framework could not judge (run_case raised, or its worker died or
    sent back an error)."""
    return framework_error_row(
        c.scenario,
        c.combo,
        c.case_dir,
        error,
        backend=c.backend_spec,
        fault_column=c.fault_column,
        transition=c.transition,
        seconds=seconds,
        io=c.io,
        **c.extra,
    )


def _draw_timeline(case_dir: str, history=None) -> None:
    """The case's timeline.html, drawn now: its file-operation logs are on this boot's monotonic clock.
    `history`: the case's events as run_case read them (None: read from the folder)."""
    from ..report.timeline import write_timeline

    try:
        write_timeline(case_dir, history=history)
    except OSError:
        pass  # no room to draw it: the verdict and the evidence stand without the picture


def framework_error_row(
    scenario,
    combo,
    case_dir: str,
    error: BaseException,
    *,
    backend: str,
    fault_column: str | None = None,
    transition: str | None = None,
    seconds: float = 0.0,
    io: str | None = None,
    **extra,
) -> ResultRow:
    """The UNKNOWN row of a case the framework could not judge; the traceback goes to the case folder."""
    from ..checkers import UNKNOWN, Verdict
    from .run import replay_command

    os.makedirs(case_dir, exist_ok=True)
    scenario_file = os.path.join(case_dir, "scenario.yaml")
    if not os.path.exists(scenario_file):
        with open(scenario_file, "w", encoding="utf-8") as f:
            f.write(scenario.as_run(combo, backend).to_yaml())
    trace = os.path.join(case_dir, FRAMEWORK_ERROR)
    text = "".join(traceback.format_exception(type(error), error, error.__traceback__))
    with open(trace, "w", encoding="utf-8") as f:
        f.write(text)
    detail = f"framework error: {type(error).__name__}: {str(error)[:400]} (traceback: {trace})"
    # where it broke, on the report's page: the innermost frames (all of it is in the file)
    frames = traceback.extract_tb(error.__traceback__)
    where = f"{frames[-1].filename}:{frames[-1].lineno} in {frames[-1].name}" if frames else "?"
    evidence = [{"where": where, "traceback": _tail(text, TRACEBACK_LINES)}]
    return ResultRow(
        scenario.name,
        str(combo),
        UNKNOWN,
        detail,
        seconds,
        (Verdict(FRAMEWORK, UNKNOWN, detail, evidence),),
        fault=fault_column,
        transition=transition,
        case_dir=case_dir,
        replay=replay_command(scenario_file, combo, backend),
    ).with_extra(**extra)


TRACEBACK_LINES = 24  # of a framework error's traceback, written out in its row (the whole one is in its file)


def _tail(text: str, lines: int) -> str:
    kept = text.rstrip("\n").splitlines()
    return "\n".join((["..."] if len(kept) > lines else []) + kept[-lines:])


def signal_name(e: BaseException) -> str:
    """The signal an interruption came from: KeyboardInterrupt is SIGINT, errors.Interrupted names its own."""
    if isinstance(e, Interrupted):  # a KeyboardInterrupt too: asked first
        return str(e.signal_name)
    return "SIGINT" if isinstance(e, KeyboardInterrupt) else str(getattr(e, "signal_name", "SIGTERM"))


def exit_status(e: BaseException) -> int:
    """128 + the signal's number, as a shell reports a process the signal ended: 130 SIGINT, 143 SIGTERM."""
    return 128 + int(getattr(signal, signal_name(e), signal.SIGTERM))


@contextmanager
def keeping(folder: RunFolder, columns: list[str] | None = None):
    """On an interruption inside the block: write the run folder for the rows of results.jsonl, marked
    interrupted, say so, and let the interruption go on (the command exits 130 or 143)."""
    try:
        yield
    except INTERRUPTIONS as e:
        with deferred():
            # results.jsonl, not `rows`: the interruption may come between a row's append and its return
            done, _ = folder.rows()
            paths = folder.finish(done, status=INTERRUPTED, columns=columns, why=signal_name(e))
        print(
            f"\ninterrupted by {signal_name(e)} after {len(done)} of {folder.meta.get('cases', '?')} cases; "
            f"kept: {paths['report.md']} ({paths['results.json']}, {paths['junit.xml']})",
            file=sys.stderr,
            flush=True,
        )
        raise
