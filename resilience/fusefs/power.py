"""Power loss on a FUSE run: the crash states a lost_unsynced_writes record asks for, from the mount's log.

The file system writes the seam's own operation log (journal.py), so the states come from
faults.crash_states under the record's persistence model, exactly as for an in-process run: what no
fsync made durable (file data, and folder entries no fsync of their folder, or under ext4_ordered no
later fsync at all, committed) may be lost. Operations the crash states cannot replay (a hard link, a
truncate to a non-zero length, writes to a file from before the mount opened without O_TRUNC) are named
in the states' notes, so a state that lacks their effect is never taken for the whole truth."""

from __future__ import annotations

import os

from ..faults.crash_states import CrashStates, Snapshot, power_loss_states as _power_loss_states
from ..faults.fuse_log import read_log
from ..faults.kinds import LostUnsyncedWrites


def unmodelled(log: str | os.PathLike, root: str | os.PathLike | None = None) -> list[dict]:
    """The logged operations crash states cannot replay (modelled: false), under `root` if given."""
    out = []
    base = None if root is None else os.path.abspath(str(root)).rstrip("/") + "/"
    for rec in read_log(log):
        if rec.get("modelled") is not False or rec.get("errno"):
            continue
        paths = [rec.get("path", ""), rec.get("dst") or ""]
        if base is None or any((p + "/").startswith(base) for p in paths if p):
            out.append(rec)
    return out


def power_loss_states(
    fault: LostUnsyncedWrites, snapshot: Snapshot, log: str | os.PathLike, out_dir: str | os.PathLike
) -> CrashStates:
    """faults.power_loss_states over a mount's log folder (its ops.rank*.jsonl), with a note for each
    operation under the snapshot's root that the states cannot replay."""
    states = _power_loss_states(fault, snapshot, log, out_dir)
    for rec in unmodelled(log, snapshot.root):
        where = f"{rec['path']} -> {rec['dst']}" if rec.get("dst") else rec["path"]
        states.notes.append(f"not replayed by the crash states: rank {rec.get('rank')} {rec['op']} {where}")
    return states


__all__ = ["power_loss_states", "unmodelled"]
