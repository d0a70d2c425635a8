"""How a scenario's fault steps become fault records, and how the runner carries them out.

`fault: {record}` takes any record of resilience.faults; the other steps are shorthands for the common
ones: `crash` (rank_crash), `kill` (rank_kill), `corrupt` (the at-rest kinds), `lose_unsynced`
(lost_unsynced_writes). Where a record goes depends on its layer: in-process faults are installed on
the ranks from the next rank operation on, nemesis faults run beside the job, at-rest faults damage the
checkpoint folder after the job."""
from __future__ import annotations

import os

from ..errors import ConfigError
from ..faults import (
    LostUnsyncedWrites,
    Nemesis,
    Snapshot,
    corrupt as corrupt_at_rest,
    faults_from,
    iteration_in,
    power_loss_states,
    read_firings,
    unprobed,
)

CORRUPT_KINDS = {"truncate": "truncate", "bitflip": "bit_flip", "bit_flip": "bit_flip", "delete": "delete_file",
                 "delete_file": "delete_file", "metadata": "metadata_damage", "metadata_damage": "metadata_damage",
                 "tracker": "tracker_damage", "tracker_damage": "tracker_damage", "staging": "leftover_staging",
                 "leftover_staging": "leftover_staging", "extra": "extra_file", "extra_file": "extra_file",
                 "escape": "escaping_path", "escaping_path": "escaping_path", "pickle": "hostile_pickle",
                 "hostile_pickle": "hostile_pickle"}

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


# ---- aiming through the learned layout ------------------------------------------------------------------
OUTSIDE_SEAM = ("the backend writes these files outside the storage seam (one clean save logged none of them), "
                "so in-process faults cannot reach them: needs the FUSE layer")


def needs_layout(records: list[dict]) -> bool:
    """Any fault at all: every fault is aimed through the backend's learned layout."""
    return bool(records)


def layout_for(scenario, combo, backend: str, case_dir: str, start_method: str = "fork", io: str = "seam"):
    """The backend's layout, learned once from a clean save (runner.learn), when the scenario has faults;
    through the fault-injecting file system when `io` is fuse (it sees every file, whoever writes it)."""
    from .scenario import FAULT_STEPS
    records = [s for s in scenario.steps if s.kind in FAULT_STEPS]
    if not needs_layout(records):
        return None
    from .learn import learn_layout
    return learn_layout(scenario.model, scenario.topology, combo, backend, os.path.join(case_dir, "layout"),
                        start_method=start_method, io=io)


def aim(record: dict, layout, iteration: int | None) -> tuple[dict | None, str | None]:
    """`record` with a layout target (`path: "@data"`, "@metadata", "@pointer"; "#2": the second save
    after the fault is armed, as the caller resolved `iteration`) made a real glob, and a phase the backend
    does not announce made the operation the layout saw start it. (None, why) if it cannot apply."""
    rec = dict(record)
    path = rec.get("path") or (rec.get("target") or {}).get("path")
    if isinstance(path, str) and path.startswith("@"):
        role = path[1:].split("#")[0]
        rank = rec.get("rank") if isinstance(rec.get("rank"), int) else None
        if layout is not None and not layout.seam and layout.has(role) and not layout.reaches(role, rank):
            return None, OUTSIDE_SEAM  # some files go through the seam, not these
        glob = layout.write_glob(role, iteration, rank) if layout is not None else None
        if glob is None:
            return None, (f"rank {rank} writes no {role} file" if rank is not None else f"no {role} file") + \
                (f" in this backend's saves ({layout.describe()})" if layout is not None else "")
        if "path" in rec:
            rec["path"] = glob
        else:
            rec["target"] = dict(rec["target"], path=glob)
    phase = rec.get("phase")
    if phase and layout is not None and layout.logged and phase not in layout.announced:
        seen = layout.phases.get(phase)
        if seen is None and not layout.seam:
            return None, OUTSIDE_SEAM  # it may reach the phase in files the seam does not see
        if seen is None:
            return None, f"this backend never reaches a {phase!r} phase (its saves: {layout.describe()})"
        from ..faults.layout import _template
        rank = rec.get("rank") if isinstance(rec.get("rank"), int) else None
        glob = (layout.write_glob("data", iteration, rank) if phase == "write" else None) or \
            "*/" + _template(seen["path"], layout.iteration, staging=True).format(
                iteration=iteration if iteration is not None else "*")
        rec.pop("phase")
        # the phase begins as the operation that starts it runs: a crash just before it
        rec.update({"op": "write" if phase == "write" else seen["op"], "path": glob, "when": "before"})
    return rec, None


def path_wants_save(record: dict) -> int:
    """Which save after the arming point a layout target means (1: the next one)."""
    path = record.get("path") or (record.get("target") or {}).get("path") or ""
    if isinstance(path, str) and path.startswith("@") and "#" in path:
        try:
            return max(1, int(path.split("#", 1)[1]))
        except ValueError:
            return 1
    return 1


def describe(record: dict) -> str:
    """A record in one line, as the fault prints itself (its raw form if it is not valid)."""
    try:
        return str(validate(record, 1 << 16))
    except ConfigError:
        return str(record)


def validate(record: dict, world: int):
    """The Fault for a record, or ConfigError naming the field."""
    return faults_from([record], world=world, where="fault")[0]


# ---- rank side -----------------------------------------------------------------------------------------
def needs_oplog(records: list[dict]) -> bool:
    return any(r.get("kind") == "lost_unsynced_writes" for r in records)


# ---- runner side ------------------------------------------------------------------------------------
def start_nemesis(job, records: list[dict], root: str, report: str) -> Nemesis:
    os.makedirs(root, exist_ok=True)
    return Nemesis(job, records, folder=root, report=report).start()


def corrupt(root: str, record: dict, layout=None) -> dict:
    """Damage the checkpoint under `root` (aimed through `layout` when learned); what was done, with the
    iteration it hit (or None). Raises NothingToDamage, or its NotApplicable when this backend has
    nothing the fault is about."""
    damage = corrupt_at_rest(record, root, layout).to_dict()
    if layout is not None:
        from ..faults.layout_damage import iteration_of
        damage["iteration"] = iteration_of(layout, os.path.abspath(root), damage["file"])
    else:
        damage["iteration"] = iteration_in(damage.get("rel") or "")
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
