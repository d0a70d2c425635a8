"""What a rank's job installs on its I/O: the object store it writes to, its creates, renames and deletions
recorded for the whole job, the in-process faults armed at their op, and a planned power loss, logged from
the job's start. `plan` is the rank's job (runner.rankprog.RankJob)."""

from __future__ import annotations

import contextlib


def use_store(stack: contextlib.ExitStack, plan, rank: int) -> None:
    """On an object store, the seam maps the checkpoint folder's paths to the case's keys for the whole job,
    beneath everything else installed on it: through the fault proxy, signed with this rank's own key (the
    proxy tells the ranks' requests apart by it)."""
    if plan.store is None:
        return
    from .. import storage
    from ..objectstore.requests import rank_access_key
    from ..objectstore.store import CaseStore

    key = rank_access_key(rank) if plan.proxy else None
    fs = CaseStore.from_dict(plan.store).filesystem(plan.root, endpoint=plan.proxy or None, access_key=key)
    stack.enter_context(storage.use(fs))


def record_file_ops(stack: contextlib.ExitStack, plan, rank: int) -> None:
    """Log this rank's creates, renames and deletions for the whole job, beneath any fault armed later (an
    operation a fault stopped is not logged). Under the file system its own log has them."""
    if not plan.file_ops_dir or plan.control:
        return
    from .. import storage
    from .file_ops import FileOpRecorder

    recorder = FileOpRecorder(storage.current(), plan.file_ops_dir, rank, plan.job)
    stack.callback(recorder.close)
    stack.enter_context(storage.use(recorder))


def _is_power_loss(record: dict) -> bool:
    return record.get("kind") == "lost_unsynced_writes"


def log_for_power_loss(stack: contextlib.ExitStack, plan, rank: int):
    """A job that plans a power loss (through the seam) logs every file operation from its start, over a
    snapshot of the folder taken before its first: a save still being written when the power loss is armed
    (an async writer) is then whole in the log, not half in a snapshot. Its power-loss records count from
    the op they are armed at (the injector's matcher is told each op reached); None without one."""
    power = [f for f in plan.faults if _is_power_loss(f["fault"])]  # the in-process ones: the seam carries them
    if not power:
        return None
    import torch.distributed as dist

    from ..faults import Snapshot, faults_from, inject

    dist.barrier()  # the folder as it is now is what every operation of the job starts from; snapshot it once
    if rank == 0:
        Snapshot.take(plan.root, plan.snapshot_dir)
    dist.barrier()
    faults = faults_from([f["fault"] for f in power], world=plan.topo.world, where="fault")
    return stack.enter_context(
        inject(
            faults,
            rank=rank,
            world=plan.topo.world,
            report=plan.fault_log,
            oplog_dir=plan.oplog_dir,
            arm_at=[f["arm_at"] for f in power],
        )
    )


def arm(stack: contextlib.ExitStack, plan, rank: int, index: int) -> None:
    """Install the in-process faults armed at this op: from here on they watch this rank's I/O. The file
    system's records armed here are told so. A power loss is already installed (log_for_power_loss)."""
    if plan.control and index in plan.fs_arms:
        from ..fusefs import tell

        tell(plan.control, "arm", index)
    if plan.proxy and index in plan.fs_arms:
        from ..objectstore.proxy import reached

        reached(plan.proxy, rank, index)
    records = [
        f["fault"] for f in plan.faults if f["arm_at"] == index and (plan.control or not _is_power_loss(f["fault"]))
    ]
    if not records:
        return
    from ..faults import faults_from, inject

    faults = faults_from(records, world=plan.topo.world, where="fault")  # read once, as they cross to the rank
    stack.enter_context(inject(faults, rank=rank, world=plan.topo.world, report=plan.fault_log))
