"""How the runner carries out a scenario's faults (read into `Fault` records by runner.fault_steps): aimed
through the backend's learned layout, damage at rest, the disks a power loss can leave, and which of them
never fired. Where a fault goes depends on its layer (`Fault.layer`): in-process faults are installed on
the ranks from the next rank operation on, nemesis faults run beside the job, at-rest faults damage the
checkpoint folder after the job (runner.plan)."""

from __future__ import annotations

import os
from dataclasses import replace

from ..faults import (
    Fault,
    LostUnsyncedWrites,
    Snapshot,
    WriterKill,
    corrupt as corrupt_at_rest,
    iteration_in,
    power_loss_states,
    read_firings,
    unprobed,
)
from ..faults.layout import Layout, _template

# ---- aiming through the learned layout ------------------------------------------------------------------
OUTSIDE_SEAM = (
    "the backend writes these files outside the storage seam (one clean save logged none of them), "
    "so in-process faults cannot reach them: needs the FUSE layer"
)


def layout_for(
    scenario, combo, backend: str, case_dir: str, start_method: str = "fork", io: str = "seam"
) -> Layout | None:
    """The backend's layout, learned once from a clean save (runner.learn), when the scenario has faults
    (every fault is aimed through it); through the fault-injecting file system when `io` is fuse (it sees
    every file, whoever writes it)."""
    if not any(s.fault is not None for s in scenario.steps):
        return None
    from .learn import learn_layout

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


def aim(fault: Fault, layout: Layout | None, iteration: int | None) -> tuple[Fault | None, str | None]:
    """`fault` with a layout target (`path: "@data"`, "@metadata", "@pointer"; "#2": the second save
    after the fault is armed, as the caller resolved `iteration`) made a real glob, and a phase the backend
    does not announce made the operation the layout saw start it. (None, why) if it cannot apply."""
    if isinstance(fault, WriterKill) and layout is not None and layout.data_writer == "rank":
        return None, IN_RANK
    target, trigger = fault.target, fault.trigger
    # a writer kill finds its rank's writer by process ancestry, not by file name: any file of the role
    rank = target.rank if isinstance(target.rank, int) and not isinstance(fault, WriterKill) else None
    path = target.path
    if path is not None and path.startswith("@"):
        role = path[1:].split("#")[0]
        if (
            fault.layer == "inject"  # the nemesis looks at the folder from outside: it sees every file
            and layout is not None
            and not layout.seam
            and layout.has(role)
            and not layout.reaches(role, rank)
        ):
            return None, OUTSIDE_SEAM  # some files go through the seam, not these
        glob = layout.write_glob(role, iteration, rank) if layout is not None else None
        if glob is None:
            return None, (f"rank {rank} writes no {role} file" if rank is not None else f"no {role} file") + (
                f" in this backend's saves ({layout.describe()})" if layout is not None else ""
            )
        target = replace(target, path=glob)
    phase = trigger.phase
    if phase and layout is not None and layout.logged and phase not in layout.announced:
        seen = layout.phases.get(phase)
        if seen is None and not layout.seam:
            return None, OUTSIDE_SEAM  # it may reach the phase in files the seam does not see
        if seen is None:
            return None, f"this backend never reaches a {phase!r} phase (its saves: {layout.describe()})"
        glob = (layout.write_glob("data", iteration, rank) if phase == "write" else None) or "*/" + _template(
            seen["path"], layout.iteration, staging=True
        ).format(iteration=iteration if iteration is not None else "*")
        # the phase begins as the operation that starts it runs: a crash just before it
        target = replace(target, op="write" if phase == "write" else seen["op"], path=glob)
        trigger = replace(trigger, phase=None, when="before")
    if (target, trigger) == (fault.target, fault.trigger):
        return fault, None
    return replace(fault, target=target, trigger=trigger).check(), None


IN_RANK = (
    "one clean save showed each rank creating its data files in its own process: the writer is a thread of the "
    "rank; nothing to kill alone"
)
NO_WRITER = "writer_kill strikes the background writer of an async save, and this combination saves synchronously"


def path_wants_save(fault: Fault) -> int:
    """Which save after the arming point a layout target means (1: the next one)."""
    path = fault.target.path or ""
    if path.startswith("@") and "#" in path:
        try:
            return max(1, int(path.split("#", 1)[1]))
        except ValueError:
            return 1
    return 1


def corrupt(root: str, fault: Fault, layout: Layout | None = None) -> dict:
    """Damage the checkpoint under `root` (aimed through `layout` when learned); what was done, with the
    iteration it hit (or None). Raises NothingToDamage, or its NotApplicable when this backend has
    nothing the fault is about."""
    damage = corrupt_at_rest(fault, root, layout).to_dict()
    if layout is not None:
        from ..faults.layout_damage import iteration_of

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
