"""How the runner carries out a scenario's faults (read into `Fault` records by runner.fault_steps): the
layout learned for them to be aimed through (the aiming itself is runner.aiming's, pure), damage at rest,
the disks a power loss can leave, and which of them never fired. Where a fault goes depends on its layer
(`Fault.layer`): in-process faults are installed on the ranks from the next rank operation on, nemesis
faults run beside the job, at-rest faults damage the checkpoint folder after the job (runner.plan)."""

from __future__ import annotations

import os

from ..faults import (
    Fault,
    LostUnsyncedWrites,
    Snapshot,
    corrupt as corrupt_at_rest,
    iteration_in,
    power_loss_states,
    read_firings,
    unprobed,
)
from ..faults.layout import Layout
from ..faults.layout_damage import iteration_of
from .adapters import BackendName
from .aiming import OUTSIDE_SEAM
from .learn import learn_layout


def layout_for(
    scenario, combo, backend: BackendName, case_dir: str, start_method: str = "fork", io: str = "seam"
) -> Layout | None:
    """The backend's layout, learned once from a clean save (runner.learn), when the scenario has faults
    (every fault is aimed through it); through the fault-injecting file system when `io` is fuse (it sees
    every file, whoever writes it)."""
    if not any(s.fault is not None for s in scenario.steps):
        return None
    return learn_layout(
        scenario.model,
        scenario.topology,
        combo,
        backend,
        os.path.join(case_dir, "layout"),
        start_method=start_method,
        io=io,
        # which files a load reads aims only damage at rest
        reads=any(s.fault is not None and s.fault.layer == "at_rest" for s in scenario.steps),
    )


def corrupt(root: str, fault: Fault, layout: Layout | None = None) -> dict:
    """Damage the checkpoint under `root` (aimed through `layout` when learned); what was done, with the
    iteration it hit (or None). Raises NothingToDamage, or its NotApplicable when this backend has
    nothing the fault is about."""
    damage = corrupt_at_rest(fault, root, layout).to_dict()
    if layout is not None:
        damage["iteration"] = iteration_of(layout, os.path.abspath(root), damage["file"])
    else:
        damage["iteration"] = iteration_in(damage.get("rel") or "")
    damage["fault"] = fault.to_dict()
    return damage


def power_loss(fault: LostUnsyncedWrites, snapshot: Snapshot, oplog_dir: str, out_dir: str) -> dict:
    """The disks a power loss at `fault` can leave, built under `out_dir` from the snapshot and the job's
    operation log: their paths, how many orders were explored, and a one-line summary."""
    outside = unobserved_files(snapshot, oplog_dir)
    if outside:
        # crash states replay the operation log: files it never saw would be missing from every state
        return {
            "states": [],
            "explored": 0,
            "unobserved": outside[:5],
            "summary": f"no crash state built: {len(outside)} files were written outside the storage seam "
            f"(e.g. {outside[0]}), so the operation log cannot say what a power loss keeps",
        }
    states = power_loss_states(fault, snapshot, oplog_dir, out_dir)
    return {"states": [s.path for s in states.states], "explored": states.explored, "summary": states.summary()}


def unobserved_files(snapshot: Snapshot, oplog_dir: str) -> list[str]:
    """Files under the checkpoint root now that the snapshot did not hold and no logged operation
    created (following renames of files and folders): written by code that bypasses the seam."""
    from ..faults.oplog import read_ops

    made: set[str] = set()
    ops = read_ops(oplog_dir) if os.path.isdir(oplog_dir) else []
    for op in ops:
        if op.op == "create":
            made.add(op.path)
        elif op.op in ("rename", "exchange") and op.dst:
            pairs = [(op.path, op.dst)] + ([(op.dst, op.path)] if op.op == "exchange" else [])
            moved = set()
            for src, dst in pairs:
                moved |= {dst + m[len(src) :] for m in made if m == src or m.startswith(src + os.sep)}
            made |= moved
    before = set()
    if snapshot.copy:
        for dirpath, _, names in os.walk(snapshot.copy):
            before |= {os.path.relpath(os.path.join(dirpath, n), snapshot.copy) for n in names}
    out = []
    for dirpath, _, names in os.walk(snapshot.root):
        for n in names:
            path = os.path.join(dirpath, n)
            rel = os.path.relpath(path, snapshot.root)
            if path not in made and rel not in before:
                out.append(rel)
    return sorted(out)


def unfired(configured: list[Fault], report: str) -> list[Fault]:
    """The faults of the ranks and the nemesis that never fired (at-rest faults are done by the runner)."""
    return unprobed([f for f in configured if f.layer in ("inject", "nemesis")], read_firings(report))


__all__ = [
    "OUTSIDE_SEAM",  # aimed in runner.aiming; the runner reads it here too, beside the faults' outcomes
    "corrupt",
    "layout_for",
    "power_loss",
    "unfired",
    "unobserved_files",
]
