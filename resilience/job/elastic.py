"""Restarts by torchrun itself (`--restarts-by torchrun`): the job runs once, its agent restarting its
workers when one fails (`--max-restarts`, given to torchrun as PET_MAX_RESTARTS unless the command sets
it), and each group of workers the agent starts is a run of its own for the checkers: its output in
`run-N/output.log`, what it said read on its own. A group's number is the TORCHELASTIC_RESTART_COUNT the
agent gives its workers, read from their environment as they appear.

A kill between saves strikes the workers alone (every process holding a rank), never the agent: it sees
its workers fail as after a crash, and restarts them. Damage at rest, a power loss, a SIGTERM and a lost
node need the whole job stopped, which torchrun's own restarts never do: those columns are N/A here."""

from __future__ import annotations

import dataclasses
import os
import time
from collections.abc import Callable, Iterable, Sequence

from ..faults.base import Fault
from ..fusefs.mount import mounted
from . import tree
from .base import RunOutcome
from .columns import CasePlan
from .command import RANK_ENV, JobCommand
from .patterns import Patterns
from .process import FS_LOG, POLL, Run, WholeJobKill

RESTARTER = "torchrun"
GENERATION_POLL = 0.05  # seconds between looks for a new group of workers


def elastic_plan(plan: CasePlan) -> CasePlan:
    """The column's plan with torchrun restarting: its kills strike the workers alone; N/A (why) where the
    column needs the whole job stopped."""
    if plan.na is not None:
        return plan
    kill = plan.kill
    why = None
    if plan.damage is not None or plan.power_loss:
        why = "damage at rest needs the job stopped, and torchrun restarts its workers at once"
    elif kill is not None and kill.term:
        why = "torchrun's agent passes SIGTERM on to its workers and ends: it restarts nothing"
    elif kill is not None and kill.node is not None:
        why = "a lost node stops its agent, whose restarts torchrun cannot make"
    if why is not None:
        return CasePlan(plan.column, na=f"with --restarts-by torchrun, {why} (use the default --restarts-by runner)")

    def workers(k: WholeJobKill | None) -> WholeJobKill | None:
        return None if k is None else dataclasses.replace(k, workers_only=True)

    chain = tuple(dataclasses.replace(c, kill=workers(c.kill)) for c in plan.chain)
    return dataclasses.replace(plan, kill=workers(kill), chain=chain)


def _generation(run: Run, seen: dict[int, int | None]) -> int:
    """The highest group of workers started so far (0 until the agent restarted them)."""
    for proc, token in zip(run.procs, run.tokens):
        for pid in tree.members(proc.pid, token, scan=False):
            if pid not in seen:
                seen[pid] = tree.restart_count(pid)
    return max((g for g in seen.values() if g is not None), default=0)


def run_elastic(
    command: JobCommand,
    *,
    folder_of: Callable[[int], str],
    backing: str,
    mountpoint: str,
    patterns: Patterns,
    timeout: float,
    max_restarts: int,
    faults: Iterable[Fault] = (),
    kills: Sequence[WholeJobKill | None] = (),
    on_run: Callable[[RunOutcome], None] | None = None,
) -> list[RunOutcome]:
    """The job run once, torchrun restarting its workers, split into a run per group of workers (run k in
    `folder_of(k)`; the mount's log stays in run 0's and each later run's `fs` leads there). `kills[k]`
    is the runner's kill in group k. The whole of it has `timeout` seconds for each group it may start."""
    first = folder_of(0)
    for path in (first, backing, mountpoint):
        os.makedirs(path, exist_ok=True)
    env_command = dataclasses.replace(command, max_restarts=max_restarts)
    plans = list(kills) or [None]
    runs: list[RunOutcome] = []
    start = time.monotonic()
    with mounted(
        backing, mountpoint, faults=list(faults), log=os.path.join(first, FS_LOG), paths_as=backing, rank_env=RANK_ENV
    ) as mount:
        run = Run(env_command, mountpoint, first, patterns, plans[0])
        seen: dict[int, int | None] = {}
        generation, began, folder, fired = 0, start, first, 0
        hang, timed_out, looked = None, False, 0.0
        try:
            deadline = start + timeout * (max_restarts + 1)
            while run.running():
                plan = run.kill_plan
                if plan is not None and plan.on_firing and mount.firings() and generation == 0:
                    run.kill_whole_job(plan.reason)
                if time.monotonic() - looked >= GENERATION_POLL:
                    looked = time.monotonic()
                    now = _generation(run, seen)
                    if now > generation:
                        nxt = folder_of(now)
                        os.makedirs(nxt, exist_ok=True)
                        os.symlink(os.path.relpath(os.path.join(first, FS_LOG), nxt), os.path.join(nxt, FS_LOG))
                        said = run.output.split(nxt)
                        firings = mount.firings()
                        runs.append(_ended(generation, folder, began, said.observed, run, firings[fired:]))
                        fired = len(firings)
                        run.next_generation(plans[now] if now < len(plans) else None)
                        generation, began, folder = now, time.monotonic(), nxt
                        if on_run is not None:
                            on_run(runs[-1])
                if time.monotonic() > deadline:
                    hang, timed_out = run.hang_report(), True
                    break
                time.sleep(POLL)
        finally:
            run.stop()
        last = RunOutcome(
            generation,
            folder,
            None if timed_out else run.exit_code(),
            time.monotonic() - began,
            run.output.reader.observed,
            timed_out=timed_out,
            killed="timeout" if timed_out else run.killed,
            killed_at=run.killed_at,
            hang=hang,
            firings=tuple(mount.firings()[fired:]),
        )
    runs.append(last)
    if on_run is not None:
        on_run(last)
    return runs


def _ended(index: int, folder: str, began: float, observed, run: Run, firings: list[dict]) -> RunOutcome:
    """A group of workers torchrun restarted: killed by the runner or by a fault (-9), else it failed (1).
    `firings`: the mount's, while this group ran."""
    crashed = run.killed is not None or any("kill" in str(f.get("action", "")) for f in firings)
    return RunOutcome(
        index,
        folder,
        -9 if crashed else 1,
        time.monotonic() - began,
        observed,
        killed=run.killed,
        killed_at=run.killed_at,
        firings=tuple(firings),
        restarted_by=RESTARTER,
    )


__all__ = ["RESTARTER", "elastic_plan", "run_elastic"]
