"""How a scenario's fault steps become fault records, and how the runner carries them out.

`fault: {record}` takes any record of resilience.faults; the other steps are shorthands for the common
ones: `crash` (rank_crash), `kill` (rank_kill), `corrupt` (the at-rest kinds), `lose_unsynced`
(lost_unsynced_writes). Where a record goes depends on its layer: in-process faults are installed on
the ranks from the next rank operation on, nemesis faults run beside the job, at-rest faults damage the
checkpoint folder after the job."""
from __future__ import annotations

import contextlib
import os
import re

from ..errors import ConfigError
from ..faults import (LostUnsyncedWrites, Nemesis, Snapshot, corrupt as corrupt_at_rest, faults_from, inject,
                      power_loss_states, read_firings, unprobed)

CORRUPT_KINDS = {"truncate": "truncate", "bitflip": "bit_flip", "bit_flip": "bit_flip", "delete": "delete_file",
                 "delete_file": "delete_file", "metadata": "metadata_damage", "metadata_damage": "metadata_damage",
                 "tracker": "tracker_damage", "tracker_damage": "tracker_damage", "staging": "leftover_staging",
                 "leftover_staging": "leftover_staging", "extra": "extra_file", "extra_file": "extra_file",
                 "escape": "escaping_path", "escaping_path": "escaping_path"}
_ITER = re.compile(r"iter_(\d{7})|step-(\d+)")


def record_of(kind: str, args: dict) -> dict:
    """The fault record a step stands for (not yet validated)."""
    a = dict(args)
    if kind == "fault":
        return a
    if kind == "crash":
        rec = {"kind": "rank_crash"}
    elif kind == "kill":
        rec = {"kind": "rank_kill"}
        if isinstance(a.get("when"), dict):  # `when: {file, size}` or `when: {after: seconds}`: the flat keys
            a.update(a.pop("when"))
    elif kind == "lose_unsynced":
        rec = {"kind": "lost_unsynced_writes"}
    elif kind == "corrupt":
        what = a.pop("kind", "truncate")
        if what not in CORRUPT_KINDS:
            raise ConfigError("kind", f"unknown corruption {what!r}", f"use one of {', '.join(sorted(CORRUPT_KINDS))}")
        rec = {"kind": CORRUPT_KINDS[what]}
    else:
        raise ValueError(kind)
    if a.get("rank") == "all":
        a.pop("rank")
    if "after_bytes" in a:
        a["at_byte"] = a.pop("after_bytes")
    if "file" in a:
        a["path"] = a.pop("file")
    rec.update(a)
    return rec


def validate(record: dict, world: int):
    """The Fault for a record, or ConfigError naming the field."""
    return faults_from([record], world=world, where="fault")[0]


# ---- rank side -----------------------------------------------------------------------------------------
@contextlib.contextmanager
def rank_faults(records: list[dict], rank: int, world: int, report: str, oplog_dir: str | None):
    """Install in-process faults on this rank's checkpoint I/O."""
    with inject(records, rank=rank, world=world, report=report, oplog_dir=oplog_dir):
        yield


def needs_oplog(records: list[dict]) -> bool:
    return any(r.get("kind") == "lost_unsynced_writes" for r in records)


# ---- runner side ------------------------------------------------------------------------------------
def start_nemesis(job, records: list[dict], root: str, report: str) -> Nemesis:
    os.makedirs(root, exist_ok=True)
    return Nemesis(job, records, folder=root, report=report).start()


def corrupt(root: str, record: dict) -> dict:
    """Damage the checkpoint under `root`; what was done, with the iteration it hit (or None)."""
    damage = corrupt_at_rest(record, root).to_dict()
    m = _ITER.search(damage.get("rel") or "")
    damage["iteration"] = int(m.group(1) or m.group(2)) if m else None
    damage["fault"] = record
    return damage


def power_loss(record: dict, snapshot: Snapshot, oplog_dir: str, out_dir: str) -> dict:
    fault = validate(record, 1 << 16)
    assert isinstance(fault, LostUnsyncedWrites)
    outside = unobserved_files(snapshot, oplog_dir)
    if outside:
        # crash states replay the operation log: files it never saw would be missing from every state
        return {"states": [], "explored": 0, "unobserved": outside[:5],
                "summary": f"no crash state built: {len(outside)} files were written outside the storage seam "
                           f"(e.g. {outside[0]}), so the operation log cannot say what a power loss keeps"}
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
                moved |= {dst + m[len(src):] for m in made if m == src or m.startswith(src + os.sep)}
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


def unfired(configured: list[dict], report: str) -> list[str]:
    faults = faults_from([r for r in configured], where="fault")
    faults = [f for f in faults if f.layer in ("inject", "nemesis")]
    return [str(f) for f in unprobed(faults, read_firings(report))]


def firings(report: str) -> list[dict]:
    return read_firings(report)
