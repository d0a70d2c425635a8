"""Restart as a scheduler does: the case's first run with its fault, then the same command again, on the
same checkpoint folder, until the job exits 0 (it says it is done), fails for good (two restarts in a row
that report no step at all), hangs (a run past its timeout), or --max-restarts restarts were made. Damage
at rest is done between the first run and the first restart, with nothing mounted. A chained column
kills restarts too; after a power loss the restarts are made once for each crash state of the folder
(faults.crash_states, from the first run's operation log), each on a copy of its own."""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass

from .base import RunOutcome
from .columns import CasePlan
from .command import JobCommand
from .damage import apply
from .patterns import Patterns
from .process import FS_LOG, run_once

DISK, CKPT = "disk", "ckpt"  # a case's checkpoint folder (the backing) and its mount point
STATES = "states"  # a power loss's crash states, each a folder the restarts of that state run on


@dataclass
class PowerState:
    """One crash state after a power loss: how it was built, its folder, and the runs restarted on it (the
    first run, the one the power loss struck, included)."""

    index: int
    how: str
    path: str
    runs: list[RunOutcome]


@dataclass
class Trial:
    """The runs of one case, and what the damage at rest did (None: none done)."""

    runs: list[RunOutcome]
    damage: dict | None = None
    damage_skipped: str = ""  # why a planned damage was not done
    states: list[PowerState] | None = None  # after a power loss: each crash state's restarts
    states_summary: str = ""  # how the crash states were built, or why none was


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
    max_states: int = 4,
    by_torchrun: bool = False,
) -> Trial:
    backing = os.path.join(case_dir, DISK)
    mountpoint = command.ckpt_dir or os.path.join(case_dir, CKPT)
    if by_torchrun:  # one run of the job; each group of workers its agent starts is a run (elastic.py)
        from .elastic import run_elastic

        runs = run_elastic(
            command,
            folder_of=lambda i: os.path.join(case_dir, f"run-{i}"),
            backing=backing,
            mountpoint=mountpoint,
            patterns=patterns,
            timeout=timeout,
            max_restarts=max_restarts,
            faults=plan.records,
            kills=[plan.kill, *(c.kill for c in plan.chain)],
            on_run=on_run,
        )
        return Trial(runs)

    def one(index: int, *, on: str = backing, under: str = case_dir, **fault) -> RunOutcome:
        run = run_once(
            command,
            index=index,
            folder=os.path.join(under, f"run-{index}"),
            backing=on,
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
    if plan.power_loss:
        if between_fired(trial.runs[0]):
            _restart_on_each_state(trial, backing, case_dir, max_states, max_restarts, one)
        else:
            trial.states_summary = "the first run was not killed between two saves, so no power was lost"
        return trial
    while should_restart(trial.runs, max_restarts):
        i = len(trial.runs)
        trial.runs.append(one(i, kill=plan.chain[i - 1].kill if i - 1 < len(plan.chain) else None))
    return trial


def _restart_on_each_state(
    trial: Trial, backing: str, case_dir: str, max_states: int, max_restarts: int, one: Callable[..., RunOutcome]
) -> None:
    from ..faults.crash_states import Snapshot, crash_states

    first = trial.runs[0]
    # a case's folder starts empty: all it holds came through the mount, and its log has every byte written
    states = crash_states(
        Snapshot.empty(backing),
        os.path.join(first.folder, FS_LOG),
        os.path.join(case_dir, STATES),
        max_states=max_states,
    )
    trial.states_summary = states.summary()
    trial.states = []
    for st in states.states:
        runs = [first]
        under = os.path.join(case_dir, f"state-{st.index:02d}")
        while should_restart(runs, max_restarts):
            runs.append(one(len(runs), on=st.path, under=under))
        trial.states.append(PowerState(st.index, st.how, st.path, runs))


__all__ = ["PowerState", "Trial", "run_trial", "should_restart"]
