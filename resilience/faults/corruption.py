"""Corruption at rest: pure file operations on a checkpoint root, no processes.

Each function damages exactly one thing and returns a Damage record of exactly what it did (file, offset,
bits, old and new size or content) for the history. Which checkpoint, which rank's files, which file,
offset and bit come from the fault's target, and whatever it leaves open is drawn from
random.Random(fault.seed), so the same record always does the same damage.

Where to look comes from a learned layout (faults.layout, carried out by layout_damage) or, without one,
from the folder and file names of the vocabulary (vocab.folders: iter_N folders, the tracker, staging
folders, LOCAL rank folders, the manifest), which torchtitan's step-N folders extend. Either way the file
chosen is damaged alike (faults.file_damage) and the record is a faults.damage_records.Damage."""

from __future__ import annotations

import json
import os
import random
import re
import shutil
from collections.abc import Callable, Iterable

from ..errors import ConfigError
from ..state import Topology
from ..vocab.folders import ITER_FOLDER, LOCAL_FOLDER, MANIFEST, RANK_FOLDER, TRACKER, staging_name
from .base import Fault, matches_path, typed
from .damage_records import Damage, NothingToDamage, flip_record, planted_record, record
from .file_damage import damage_metadata_file, damage_pointer_file, flip_byte, forge_escaping_path
from .hostile_pickle import DCP_METADATA, plant_among, plant_metadata
from .kinds import (
    METADATA_FILES,
    BitFlip,
    DeleteFile,
    EscapingManifestPath,
    ExtraFile,
    HostilePickle,
    LeftoverStaging,
    MetadataDamage,
    TrackerDamage,
    Truncate,
)
from .layout_damage import ACTIONS as LAYOUT_ACTIONS

# ours and Megatron's, and torchtitan's DCP step folders
CHECKPOINT_FOLDER = re.compile(rf"{ITER_FOLDER.pattern}|step-(\d+)")
_DCP_RANK = re.compile(r"__(\d+)_\d+\.distcp")


# ---- where: checkpoints, ranks, files -------------------------------------------------------------
def checkpoint_folders(root: str) -> list[tuple[int, str, int | None]]:
    """(iteration, folder, rank of a local checkpoint or None) of every iter_N (or step-N) folder under
    `root`."""
    out = []
    for base, rank in [(root, None)] + _local_roots(root):
        if os.path.isdir(base):
            for name in sorted(os.listdir(base)):
                m = CHECKPOINT_FOLDER.fullmatch(name)
                if m and os.path.isdir(os.path.join(base, name)):
                    out.append((int(m.group(1) or m.group(2)), os.path.join(base, name), rank))
    return out


def iteration_in(path: str) -> int | None:
    """The iteration of the first checkpoint folder (iter_N or step-N) named in `path`, or None."""
    m = CHECKPOINT_FOLDER.search(path)
    return int(m.group(1) or m.group(2)) if m else None


def _local_roots(root: str) -> list[tuple[str, int]]:
    local = os.path.join(root, LOCAL_FOLDER)
    if not os.path.isdir(local):
        return []
    return [
        (os.path.join(local, n), int(m.group(1))) for n in sorted(os.listdir(local)) if (m := RANK_FOLDER.fullmatch(n))
    ]


def files_of_rank(folder: str, rank: int) -> list[str]:
    """The files rank `rank` wrote in a global checkpoint folder: DCP's __<rank>_<n>.distcp, or the
    legacy mp_rank_TT[_PPP] folder of its (tp, pp) when its dp rank is 0 (topology from the manifest)."""
    files = _all_files(folder)
    dcp = [p for p in files if (m := _DCP_RANK.fullmatch(os.path.basename(p))) and int(m.group(1)) == rank]
    if dcp or any(_DCP_RANK.fullmatch(os.path.basename(p)) for p in files):
        return dcp
    try:
        with open(os.path.join(folder, MANIFEST)) as f:
            topo = Topology.from_dict(json.load(f)["body"]["topology"])
        c = topo.coords(rank)
    except (OSError, ValueError, KeyError, TypeError) as e:
        raise ConfigError(
            "target.rank",
            f"cannot tell which files rank {rank} wrote in {folder}: {e}",
            "choose the file with target.path instead",
        ) from None
    if c.dpcp != 0:
        return []
    sub = f"mp_rank_{c.tp:02d}" + (f"_{c.pp:03d}" if topo.pp > 1 else "")
    return [p for p in files if os.path.relpath(p, folder).split(os.sep)[0] == sub]


def _all_files(folder: str) -> list[str]:
    out = []
    for dirpath, _, names in os.walk(folder):
        out += [os.path.join(dirpath, n) for n in names]
    return sorted(out)


def _pick_folder(root: str, fault: Fault, rng: random.Random) -> tuple[str, int | None]:
    found = checkpoint_folders(root)
    rank = fault.target.rank
    if rank is not None and any(r is not None for _, _, r in found):
        found = [x for x in found if x[2] == rank]
    if not found:
        raise NothingToDamage(
            "target", f"no checkpoint folder under {root}" + (f" for rank {rank}" if rank is not None else "")
        )
    iteration = fault.target.iteration if fault.target.iteration is not None else max(it for it, _, _ in found)
    chosen = sorted((p, r) for it, p, r in found if it == iteration)
    if not chosen:
        raise ConfigError(
            "target.iteration",
            f"no checkpoint of iteration {iteration} under {root}",
            f"saved: {sorted({it for it, _, _ in found})}",
        )
    return chosen[rng.randrange(len(chosen))] if len(chosen) > 1 else chosen[0]


def _pick_shard(root: str, fault: Fault, rng: random.Random) -> str:
    folder, local_rank = _pick_folder(root, fault, rng)
    if fault.target.rank is not None and local_rank is None:
        files = files_of_rank(folder, fault.target.rank)  # type: ignore[arg-type]  # at rest: one rank
    else:
        files = _all_files(folder)
    files = [
        p
        for p in files
        if matches_path(fault.target.path, p, os.path.relpath(p, root))
        and (fault.target.path is not None or os.path.basename(p) not in METADATA_FILES)
    ]
    if not files:
        raise NothingToDamage("target", f"no file in {folder} matches {fault}")
    return files[rng.randrange(len(files))]


def _tracker_root(root: str, fault: Fault, rng: random.Random) -> str:
    local = _local_roots(root)
    if not local:
        return root
    if fault.target.rank is not None:
        for base, r in local:
            if r == fault.target.rank:
                return base
        raise ConfigError("target.rank", f"no local checkpoints of rank {fault.target.rank} under {root}")
    return local[rng.randrange(len(local))][0]


# ---- what -------------------------------------------------------------------------------------------
def truncate(root: str, fault: Truncate, rng: random.Random) -> Damage:
    path = _pick_shard(root, fault, rng)
    old = os.path.getsize(path)
    new = fault.length if fault.length is not None else (rng.randrange(old) if old else 0)
    if new > old:
        raise ConfigError("length", f"{new} is longer than {path} ({old} bytes)", "truncate cuts; use a smaller length")
    os.truncate(path, new)
    return record(fault, "truncate", root, path, old_size=old, new_size=new)


def bit_flip(root: str, fault: BitFlip, rng: random.Random) -> Damage:
    path = _pick_shard(root, fault, rng)
    size = os.path.getsize(path)
    if size == 0:
        raise NothingToDamage("target", f"{path} is empty: no bit to flip")
    offset = fault.target.offset if fault.target.offset is not None else rng.randrange(size)
    if offset >= size:
        raise ConfigError("target.offset", f"{offset} is past the end of {path} ({size} bytes)")
    bits = fault.bits if fault.bits is not None else (rng.randrange(8),)
    mask = 0
    for b in bits:
        mask |= 1 << b
    old = flip_byte(path, offset, mask)
    return flip_record(fault, root, path, offset, bits, old, mask)


def delete_file(root: str, fault: DeleteFile, rng: random.Random) -> Damage:
    path = _pick_shard(root, fault, rng)
    old = os.path.getsize(path)
    os.unlink(path)
    return record(fault, "delete", root, path, old_size=old)


def metadata_damage(root: str, fault: MetadataDamage, rng: random.Random) -> Damage:
    folder, _ = _pick_folder(root, fault, rng)
    # another implementation's checkpoint (stock DCP, megatron-core) has no manifest.json: its own metadata
    name = fault.name or next((n for n in METADATA_FILES if os.path.isfile(os.path.join(folder, n))), METADATA_FILES[0])
    path = os.path.join(folder, name)
    if not os.path.isfile(path):
        held = ", ".join(n for n in METADATA_FILES if os.path.exists(os.path.join(folder, n)))
        raise ConfigError("name", f"{folder} has no {name}", f"this checkpoint holds: {held}")
    return damage_metadata_file(root, path, fault, rng)


def escaping_path(root: str, fault: EscapingManifestPath, rng: random.Random) -> Damage:
    """A manifest whose file list names a path outside the folder, rewritten so its digest still matches."""
    folder, _ = _pick_folder(root, fault, rng)
    return forge_escaping_path(root, fault, folder)


def tracker_damage(root: str, fault: TrackerDamage, rng: random.Random) -> Damage:
    base = _tracker_root(root, fault, rng)
    path = os.path.join(base, TRACKER)
    iterations = sorted(
        int(m.group(1)) for n in (os.listdir(base) if os.path.isdir(base) else []) if (m := ITER_FOLDER.fullmatch(n))
    )
    return damage_pointer_file(root, path, fault, iterations)


def leftover_staging(root: str, fault: LeftoverStaging, rng: random.Random) -> Damage:
    """A staging folder for the next iteration holding the newest checkpoint's files, the last one cut in
    half, and no manifest: what a save killed mid-write leaves."""
    base = _tracker_root(root, fault, rng)
    iterations = [(it, p) for it, p, r in checkpoint_folders(root) if os.path.dirname(p) == base]
    newest, src = max(iterations) if iterations else (0, None)
    name = staging_name(newest + 1, rng.randbytes(4).hex())
    staging = os.path.join(base, name)
    n = 1
    while os.path.exists(staging):  # the same seed again names the same folder: leave another one
        n += 1
        staging = os.path.join(base, f"{name}-{n}")
    os.makedirs(staging)
    copied = []
    if src is not None:
        files = [p for p in _all_files(src) if os.path.basename(p) != MANIFEST]
        for p in files:
            dst = os.path.join(staging, os.path.relpath(p, src))
            os.makedirs(os.path.dirname(dst), exist_ok=True)
            shutil.copyfile(p, dst)
            copied.append(dst)
        if copied:
            os.truncate(copied[-1], os.path.getsize(copied[-1]) // 2)
    return record(fault, "create staging", root, staging, detail=f"{len(copied)} files, last one cut in half")


def extra_file(root: str, fault: ExtraFile, rng: random.Random) -> Damage:
    folder, _ = _pick_folder(root, fault, rng)
    path = os.path.join(folder, fault.name)
    if os.path.exists(path):
        raise ConfigError("name", f"{path} already exists", "choose another name")
    with open(path, "wb") as f:
        f.write(rng.randbytes(fault.length))
    return record(fault, "create", root, path, new_size=fault.length)


def hostile_pickle(root: str, fault: HostilePickle, rng: random.Random) -> Damage:
    """DCP's .metadata, or else one torch.save archive among the checkpoint's files (of the target rank,
    matching the target path), rewritten to run a command when unpickled (faults.hostile_pickle)."""
    folder, local_rank = _pick_folder(root, fault, rng)
    if fault.target.rank is not None and local_rank is None:
        files = files_of_rank(folder, fault.target.rank)  # type: ignore[arg-type]  # at rest: one rank
    else:
        files = _all_files(folder)
    metadata = os.path.join(folder, DCP_METADATA)  # the pickle every rank reads, whichever rank is aimed at
    if fault.target.path is None and os.path.lexists(metadata) and metadata not in files:
        files.append(metadata)
    files = [p for p in files if matches_path(fault.target.path, p, os.path.relpath(p, root))]
    if metadata in files:
        return planted_record(root, fault, plant_metadata(root, metadata))
    return planted_record(root, fault, plant_among(root, files, rng, folder))


_ACTIONS: dict[type, Callable[..., Damage]] = {
    Truncate: truncate,
    BitFlip: bit_flip,
    DeleteFile: delete_file,
    MetadataDamage: metadata_damage,
    EscapingManifestPath: escaping_path,
    TrackerDamage: tracker_damage,
    LeftoverStaging: leftover_staging,
    ExtraFile: extra_file,
    HostilePickle: hostile_pickle,
}


def corrupt(fault: Fault, root: str | os.PathLike, layout=None) -> Damage:
    """Carry out one at-rest fault on the checkpoint root `root`; the record of exactly what it did.
    With a learned `layout` (faults.layout) the damage is aimed through it (layout_damage)."""
    [fault] = typed([fault], where="fault")
    if fault.layer != "at_rest":
        raise ConfigError(
            "fault.kind",
            f"{fault.kind} is not a corruption at rest",
            f"use one of {', '.join(c.kind for c in _ACTIONS)}",  # type: ignore[attr-defined]
        )
    root = os.path.abspath(str(root))
    if layout is not None and type(fault) in LAYOUT_ACTIONS:
        return LAYOUT_ACTIONS[type(fault)](root, fault, layout, random.Random(fault.seed))  # type: ignore[operator]
    return _ACTIONS[type(fault)](root, fault, random.Random(fault.seed))


def corrupt_all(faults: Iterable[Fault], root: str | os.PathLike) -> list[Damage]:
    """Every at-rest fault of a list, in order."""
    return [corrupt(f, root) for f in typed(faults) if f.layer == "at_rest"]
