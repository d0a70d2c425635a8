"""Restart as a scheduler does: the case's first run with its fault, then the same command again, on the
same checkpoint folder, until the job exits 0 (it says it is done), fails for good (two restarts in a row
that report no step at all), hangs (a run past its timeout), or --max-restarts restarts were made. Damage
at rest is done between the first run and the first restart, with nothing mounted."""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass

from .base import RunOutcome
from .columns import CasePlan
from .command import JobCommand
from .damage import apply
from .patterns import Patterns
from .process import run_once

DISK, CKPT = "disk", "ckpt"  # a case's checkpoint folder (the backing) and its mount point


@dataclass
class Trial:
    """The runs of one case, and what the damage at rest did (None: none done)."""

    runs: list[RunOutcome]
    damage: dict | None = None
    damage_skipped: str = ""  # why a planned damage was not done


def should_restart(runs: list[RunOutcome], max_restarts: int) -> bool:
    last = runs[-1]
    if last.exit_code == 0 or last.timed_out or len(runs) - 1 >= max_restarts:
        return False
    silent = [r for r in runs[1:][-2:] if not r.observed.points]
    return not (len(silent) == 2 and len(runs) > 2)  # two restarts in a row that trained nothing: for good


def run_trial(
    command: JobCommand,
    plan: CasePlan,
    case_dir: str,
    *,
    patterns: Patterns,
    timeout: float,
    max_restarts: int,
    between_fired: Callable[[RunOutcome], bool],
    on_run: Callable[[RunOutcome], None] | None = None,
) -> Trial:
    backing = os.path.join(case_dir, DISK)
    mountpoint = command.ckpt_dir or os.path.join(case_dir, CKPT)

    def one(index: int, **fault) -> RunOutcome:
        run = run_once(
            command,
            index=index,
            folder=os.path.join(case_dir, f"run-{index}"),
            backing=backing,
            mountpoint=mountpoint,
            patterns=patterns,
            timeout=timeout,
            **fault,
        )
        if on_run is not None:
            on_run(run)
        return run

    trial = Trial([one(0, faults=plan.records, kill=plan.kill)])
    if plan.damage is not None and plan.damage_path is not None:
        if between_fired(trial.runs[0]):
            steps = [plan.save.step] if plan.save is not None else []
            done = apply(plan.damage, backing, plan.damage_path, steps)
            if done is None:
                trial.damage_skipped = f"{plan.damage_path} was not on disk after the first run"
            else:
                trial.damage = done.to_dict()
        else:
            trial.damage_skipped = "the first run was not killed between two saves, so nothing was damaged"
    while should_restart(trial.runs, max_restarts):
        trial.runs.append(one(len(trial.runs)))
    return trial


__all__ = ["Trial", "run_trial", "should_restart"]
