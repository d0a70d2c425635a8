"""Aiming a scenario's faults at a backend's learned layout: pure, no files touched, no process started.
A layout target (`path: "@data"`, "@metadata", "@pointer", "#2" for a later save) becomes a real glob, and
a phase the backend does not announce becomes the operation the layout saw start it; a fault that cannot
apply to this backend is refused with the reason. The runner (runner.plan) aims every fault so before
a case's jobs run; learning the layout and carrying the faults out are runner.faultplan's."""

from __future__ import annotations

from dataclasses import replace

from ..faults import Fault, WriterKill
from ..faults.layout import IN_RANK_WRITERS, Layout, _template, path_glob

OUTSIDE_SEAM = (
    "the backend writes these files outside the storage seam (one clean save logged none of them), "
    "so in-process faults cannot reach them: needs the FUSE layer"
)
IN_RANK = (
    "one clean save showed each rank creating its data files in its own process: the writer is a thread of the "
    "rank; nothing to kill alone"
)
IN_LINE = (
    "one clean save showed each rank writing its data files in line, in its main thread: no writer process "
    "or thread to kill alone"
)
DECLARED = (
    "the adapter declares that this combination writes its data files {kind!r} (factory.writer): no writer "
    "process to kill alone"
)
NO_WRITER = "writer_kill strikes the background writer of an async save, and this combination saves synchronously"


def aim(fault: Fault, layout: Layout | None, iteration: int | None) -> tuple[Fault | None, str | None]:
    """`fault` with a layout target (`path: "@data"`, "@metadata", "@pointer"; "#2": the second save
    after the fault is armed, as the caller resolved `iteration`) made a real glob, and a phase the backend
    does not announce made the operation the layout saw start it. (None, why) if it cannot apply."""
    if isinstance(fault, WriterKill) and layout is not None and layout.data_writer in IN_RANK_WRITERS:
        if layout.writer_declared:
            return None, DECLARED.format(kind=layout.data_writer)
        return None, IN_LINE if layout.data_writer == "inline" else IN_RANK
    target, trigger = fault.target, fault.trigger
    never = _never_done(fault, layout)
    if never:
        return None, never
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
        doers = seen.get("ranks")
        if isinstance(target.rank, int) and phase != "write" and doers and target.rank not in doers:
            return None, (
                f"rank {target.rank} never reaches the {phase!r} phase: in one clean save only rank(s) "
                f"{', '.join(str(r) for r in doers)} did ({seen['op']} {seen['path']})"
            )
        glob = (layout.write_glob("data", iteration, rank) if phase == "write" else None) or path_glob(
            _template(seen["path"], layout.iteration, stable=True), iteration
        )
        # the phase begins as the operation that starts it runs: a crash just before it
        target = replace(target, op="write" if phase == "write" else seen["op"], path=glob)
        trigger = replace(trigger, phase=None, when="before")
    if (target, trigger) == (fault.target, fault.trigger):
        return fault, None
    return replace(fault, target=target, trigger=trigger).check(), None


def _never_done(fault: Fault, layout: Layout | None) -> str | None:
    """Why an in-process fault on an operation kind (an fsync, a rename) the rank never did in one clean save
    cannot fire (None: it can, or the layout does not say): the backend has no such operation to strike."""
    t = fault.target
    if fault.layer != "inject" or t.op is None or t.path is not None or layout is None or not layout.seam:
        return None
    if not layout.op_ranks or fault.trigger.phase is not None or t.op == "read":  # a save's ops: no load's reads
        return None
    doers = layout.op_ranks.get(t.op, [])
    if doers and not (isinstance(t.rank, int) and t.rank not in doers):
        return None
    who = f"rank {t.rank} did no {t.op}" if isinstance(t.rank, int) else f"no rank did a {t.op}"
    return f"in one clean save {who} (the operations seen: {', '.join(sorted(layout.op_ranks))})"


def path_wants_save(fault: Fault) -> int:
    """Which save after the arming point a layout target means (1: the next one)."""
    path = fault.target.path or ""
    if path.startswith("@") and "#" in path:
        try:
            return max(1, int(path.split("#", 1)[1]))
        except ValueError:
            return 1
    return 1
