"""A whole `resilience job` run: the run folder, the golden run (or one kept by an earlier run), then
each column's case into the folder, as every command writes its rows (results.jsonl as each case ends;
results.json, report.md, report.html and junit.xml at the end, also when interrupted).

Bad input stops the run before any case with one error; a golden run that shows the job cannot be
tested here (it fails on its own, no metric line, no write to its checkpoint folder, not deterministic)
removes the run folder it started: nothing is left behind."""

from __future__ import annotations

import contextlib
import os
import shutil
import sys
import time
from dataclasses import dataclass

from ..errors import ConfigError
from ..report.result_row import ResultRow
from .base import RunOutcome
from .case import run_case
from .columns import COLUMNS, parse_column
from .fuzzing import FuzzOutcome, fuzz_cases
from .golden import GOLDEN, Reference, golden_run
from .options import JobOptions


@dataclass(frozen=True)
class JobRun:
    """What a run made: its folder, the reference, the rows, the report files, and wall times."""

    folder: str
    reference: Reference
    rows: list[ResultRow]
    paths: dict[str, str]
    columns: list[str]
    golden_seconds: float
    seconds: float


def chosen_columns(options: JobOptions) -> list[str]:
    if options.matrix:
        return list(COLUMNS)
    for c in options.columns:
        name, _ = parse_column(c)
        if name not in COLUMNS:
            raise ConfigError("--column", f"unknown column {name!r}", f"use one of {', '.join(COLUMNS)}")
    return list(dict.fromkeys(options.columns))


def _say(text: str) -> None:
    print(f"job: {text}", file=sys.stderr, flush=True)


def _said_run(what: str):
    def say(run: RunOutcome) -> None:
        obs = run.observed
        acks = [a.step for a in obs.acks]
        first = obs.points[0].step if obs.points else "-"
        _say(
            f"{what} run {run.index}: {run.ended()} in {run.seconds:.1f} s; steps {first}..{obs.last_step or '-'}; "
            f"acknowledged {acks or 'none'}"
        )

    return say


def run_job(options: JobOptions) -> JobRun:
    from ..runner.case_loop import keeping

    columns = chosen_columns(options)
    folder, ref, start, golden_seconds = start_run(options, columns)
    rows: list[ResultRow] = []
    with keeping(folder, columns):
        for n, column in enumerate(columns):
            _say(f"case {n + 1}/{len(columns)}: {column} ...")
            case_dir = os.path.join(folder.path, "cases", f"{n:02d}-{column}")
            row = run_case(options, ref, column, case_dir, on_run=_said_run(column))
            folder.append(row)
            rows.append(row)
            _say(f"{column}: {row.verdict} ({row.seconds:.1f} s): {row.detail[:300]}")
    paths = folder.finish(rows, columns=columns)
    return JobRun(folder.path, ref, rows, paths, columns, golden_seconds, time.monotonic() - start)


@dataclass(frozen=True)
class JobFuzz:
    """What a fuzzing run made: its folder, the reference, its outcome, the report files."""

    folder: str
    reference: Reference
    outcome: FuzzOutcome
    paths: dict[str, str]


def fuzz_job(options: JobOptions, *, examples: int, seed: int, shrink_budget: float) -> JobFuzz:
    """The golden run, then `examples` drawn fault schedules, the first failure shrunk (fuzzing.py)."""
    from ..runner.case_loop import keeping

    folder, ref, _, _ = start_run(options, [], {"kind": "job-fuzz", "seed": seed, "cases": None})
    with keeping(folder, None):
        outcome = fuzz_cases(options, ref, folder, examples=examples, seed=seed, shrink_budget=shrink_budget, say=_say)
    paths = folder.finish(outcome.rows, columns=list(dict.fromkeys(r.column or "" for r in outcome.rows)))
    return JobFuzz(folder.path, ref, outcome, paths)


def start_run(options: JobOptions, columns: list[str], extra: dict | None = None):
    """The run folder and the golden run (or the one --golden names): (folder, reference, start time,
    golden seconds). Bad input is one ConfigError before anything runs; a golden run that shows the job
    cannot be tested removes the run folder it started."""
    from ..fusefs.mount import fuse_available
    from ..runner.case_loop import create_run_folder

    patterns = options.patterns()  # a bad pattern: one error before anything runs
    ok, why = fuse_available()
    if not ok:
        raise ConfigError("resilience job", f"every run of the job is made through a FUSE mount: {why}", "")
    start = time.monotonic()
    made_out = not os.path.isdir(options.out)
    folder = create_run_folder(
        options.out,
        f"job-{options.command.name}",
        {
            "title": f"resilience job {options.command.name}",
            "backend": None,
            "io": "the fault-injecting file system at the checkpoint folder (ranks from RANK)",
            "command": options.command.shell(),
            "columns": columns,
            "cases": len(columns),
            "patterns": patterns.to_dict(),
            "rtol": options.rtol,
            **(extra or {}),
        },
    )
    try:
        if options.golden:
            ref = Reference.load(options.golden)
            if ref.golden.nodes != options.command.nodes:
                raise ConfigError(
                    "--golden",
                    f"{ref.folder} is a golden run of {ref.golden.nodes} node(s), not {options.command.nodes}",
                    f"give --nodes {ref.golden.nodes}, or leave --golden out for a new golden run",
                )
            _say(f"golden run reused from {ref.folder}")
        else:
            _say(f"golden run of {options.command.shell()} (twice, in {folder.path}) ...")
            ref = golden_run(
                options.command,
                patterns,
                os.path.join(folder.path, GOLDEN),
                timeout=options.golden_timeout,
                rtol=options.rtol,
                on_run=_said_run("golden"),
            )
    except BaseException:
        shutil.rmtree(folder.path, ignore_errors=True)  # the error says what the job printed
        if made_out:
            with contextlib.suppress(OSError):
                os.rmdir(options.out)
        raise
    _say(f"layout: {ref.layout.describe()}")
    return folder, ref, start, time.monotonic() - start


__all__ = ["JobFuzz", "JobRun", "chosen_columns", "fuzz_job", "run_job", "start_run"]
