"""rankckpt: per-rank checkpoints written with care: temporary names, fsync, rename, verified loads. It knows
nothing of any test framework.

    rankckpt.save(shard, root, iteration, layout="tp2pp1dp1:fp32", keep=2)   # every rank, collective
    iteration, shard, manifest, skipped = rankckpt.load(root, layout=...)   # every rank, collective
    rankckpt.committed(root)                                               # one process: newest first

On disk, for iteration 3 saved by two ranks:

    root/iter_0000003/rank_00000-<save>.pt   rank 0's shard (torch.save); <save> names this save
    root/iter_0000003/rank_00001-<save>.pt   rank 1's
    root/iter_0000003/manifest.json          the commit record (rank 0): its format and version, the world
                                             size, the caller's layout, and each file's name, size and sha256
    root/latest                              the newest committed iteration, as text (for people and tools)

A save: rank 0 draws a tag for the save and every rank takes it; each rank writes its file under a name of
its own (`<file>.tmp-<pid>-<random>`), fsyncs it, renames it into place and fsyncs the folder, then the
ranks gather each file's size and digest. Rank 0 writes the manifest the same way (temporary name, fsync,
rename, folder fsync: the rename is the commit), then `latest`. Only once every rank knows the save is
committed does rank 0 remove what it replaced: files of this iteration the new manifest does not list (an
earlier save of the same iteration, which stayed whole until the new manifest replaced its own) and the
committed iterations older than the newest `keep`. A failure on any rank fails the save on every rank.

A load: each iteration with a readable manifest, newest first; every rank checks its own file's size and
sha256 against the manifest before it unpickles anything (weights_only), and the ranks agree: the newest
iteration every rank could read wins, the others are reported as skipped. An iteration saved by another
world size or layout is refused (TopologyMismatch), never loaded."""

from __future__ import annotations

import hashlib
import io
import json
import os
import secrets
import shutil
import warnings

import torch
import torch.distributed as dist

FORMAT = "rankckpt"
VERSION = 1
MANIFEST = "manifest.json"
LATEST = "latest"
PRUNE_AFTER_COMMIT, PRUNE_EARLY = "after_commit", "early"


class CheckpointError(Exception):
    """A checkpoint that cannot be saved or read; `failures` maps each rank that failed to its reason."""

    def __init__(self, message: str, failures: dict[int, str] | None = None):
        super().__init__(message)
        self.failures = dict(failures or {})


class NoCheckpoint(CheckpointError, FileNotFoundError):
    """No committed checkpoint under the root."""


class TopologyMismatch(CheckpointError, ValueError):
    """The newest checkpoint was saved by another world size or layout: rankckpt loads it only there."""


def folder_of(root: str, iteration: int) -> str:
    return os.path.join(root, f"iter_{iteration:07d}")


def file_of(rank: int, tag: str) -> str:
    return f"rank_{rank:05d}-{tag}.pt"


# ---- collectives (a job of one runs without a process group) ---------------------------------------------
def _rank_and_world() -> tuple[int, int]:
    if dist.is_available() and dist.is_initialized():
        return dist.get_rank(), dist.get_world_size()
    return 0, 1


def _gather(value, world: int) -> list:
    if world == 1:
        return [value]
    out: list = [None] * world
    dist.all_gather_object(out, value)
    return out


def _from_rank0(value, world: int):
    if world == 1:
        return value
    box = [value]
    dist.broadcast_object_list(box, src=0)
    return box[0]


# ---- durable writes ------------------------------------------------------------------------------------
def _fsync_dir(folder: str) -> None:
    fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _write_durably(path: str, data: bytes) -> None:
    """`data` at `path`, whole or not at all: a temporary name of this process, fsync, rename, folder fsync."""
    tmp = f"{path}.tmp-{os.getpid()}-{secrets.token_hex(4)}"
    try:
        with open(tmp, "wb") as f:
            view = memoryview(data)
            while view:  # a short write leaves the rest to write
                view = view[f.write(view) :]
            f.flush()
            os.fsync(f.fileno())
        os.rename(tmp, path)
    except BaseException:
        if os.path.lexists(tmp):
            os.unlink(tmp)
        raise
    _fsync_dir(os.path.dirname(path))


def _digest(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


# ---- saving --------------------------------------------------------------------------------------------
def save(
    shard: dict,
    root: str,
    iteration: int,
    *,
    layout: str = "",
    keep: int = 2,
    prune: str = PRUNE_AFTER_COMMIT,
) -> str:
    """Save this rank's `shard` (tensors and plain values) as `iteration`; every rank calls it. `layout` says
    what the shards are (the caller's parallel layout and dtypes: a load under another is refused); the
    newest `keep` committed iterations stay. `prune` "early" is what version 0.1 did (prune as soon as this
    rank's own file is in place, before the others have committed); it is kept to show what it costs.
    CheckpointError on every rank when any fails."""
    if keep < 1:
        raise ValueError(f"keep must be at least 1, got {keep}")
    rank, world = _rank_and_world()
    folder = folder_of(root, iteration)
    tag = _from_rank0(secrets.token_hex(5) if rank == 0 else None, world)
    mine = _write_rank_file(shard, root, folder, file_of(rank, tag))
    if prune == PRUNE_EARLY and rank == 0 and "error" not in mine:
        _prune_older(root, keep, iteration)  # the old bug: the others may not have their files in place yet
    entries = _gather(mine, world)
    failures = {r: e["error"] for r, e in enumerate(entries) if "error" in e}
    if failures:
        raise CheckpointError(f"iteration {iteration}: {len(failures)} rank(s) could not write", failures)
    outcome = _commit(root, folder, iteration, world, layout, tag, entries) if rank == 0 else None
    outcome = _from_rank0(outcome, world)
    if outcome:
        raise CheckpointError(f"iteration {iteration}: the commit failed: {outcome}", {0: outcome})
    if rank == 0 and prune == PRUNE_AFTER_COMMIT:
        _prune(root, keep, iteration)  # every rank knows the save is committed
    return folder


def _write_rank_file(shard: dict, root: str, folder: str, name: str) -> dict:
    """This rank's entry of the manifest (name, size, sha256), or {"error": why}."""
    buf = io.BytesIO()
    torch.save(shard, buf)
    data = buf.getvalue()
    try:
        new_folder = not os.path.isdir(folder)
        os.makedirs(folder, exist_ok=True)
        if new_folder:
            _fsync_dir(root)  # the folder's own name must survive a power loss too
        _write_durably(os.path.join(folder, name), data)
    except OSError as e:
        return {"error": f"{name}: {e}"}
    return {"name": name, "size": len(data), "sha256": _digest(data)}


def _commit(root: str, folder: str, iteration: int, world: int, layout: str, tag: str, entries: list) -> str:
    """Rank 0: the manifest (the commit), then `latest`. '' when done, else why not."""
    manifest = {
        "format": FORMAT,
        "version": VERSION,
        "iteration": iteration,
        "world_size": world,
        "layout": layout,
        "save": tag,
        "files": [dict(e, rank=r) for r, e in enumerate(entries)],
    }
    try:
        _write_durably(os.path.join(folder, MANIFEST), json.dumps(manifest, indent=1).encode())
        _write_durably(os.path.join(root, LATEST), f"{iteration}\n".encode())
    except OSError as e:
        return str(e)
    return ""


def _prune(root: str, keep: int, current: int) -> None:
    """Rank 0, once `current` is committed: what it replaced and what is older than the newest `keep`."""
    listed = _listed(root, current)
    folder = folder_of(root, current)
    for name in os.listdir(folder) if listed is not None else ():
        if name != MANIFEST and name not in listed:
            _remove(os.path.join(folder, name))
    _prune_older(root, keep, current)


def _prune_older(root: str, keep: int, current: int) -> None:
    """Every folder but `current` and the newest `keep` - 1 other committed iterations, when older."""
    newer = [it for it in committed(root) if it != current][: keep - 1]
    for it in iterations(root):
        if it != current and it not in newer and it < max(newer + [current]):
            _remove(folder_of(root, it))


def _listed(root: str, iteration: int) -> set[str] | None:
    try:
        return {f["name"] for f in read_manifest(root, iteration)["files"]}
    except CheckpointError:
        return None


def _remove(path: str) -> None:
    try:
        if os.path.isdir(path):
            shutil.rmtree(path)
        else:
            os.unlink(path)
    except OSError as e:  # the save is committed: a file left behind costs only space
        warnings.warn(f"rankckpt: could not remove {path}: {e}", stacklevel=2)


# ---- reading -------------------------------------------------------------------------------------------
def iterations(root: str) -> list[int]:
    """Every iter_NNNNNNN folder under root, committed or not, newest first."""
    names = os.listdir(root) if os.path.isdir(root) else []
    found = [int(n[5:]) for n in names if n.startswith("iter_") and n[5:].isdigit()]
    return sorted(found, reverse=True)


def read_manifest(root: str, iteration: int) -> dict:
    """The manifest of `iteration`, checked for its format; CheckpointError naming the file otherwise."""
    path = os.path.join(folder_of(root, iteration), MANIFEST)
    try:
        with open(path, "rb") as f:
            doc = json.loads(f.read())
    except (OSError, ValueError) as e:
        raise CheckpointError(f"{path}: {e}") from e
    files = doc.get("files") if isinstance(doc, dict) else None
    if not isinstance(doc, dict) or doc.get("format") != FORMAT or doc.get("version") != VERSION:
        raise CheckpointError(f"{path}: not a {FORMAT} manifest of version {VERSION}")
    if doc.get("iteration") != iteration or not isinstance(files, list) or len(files) != doc.get("world_size"):
        raise CheckpointError(f"{path}: names iteration {doc.get('iteration')} and {len(files or [])} files")
    for f in files:
        name = f.get("name") if isinstance(f, dict) else None
        if not isinstance(name, str) or os.path.basename(name) != name or name in ("", ".", ".."):
            raise CheckpointError(f"{path}: a file entry that is not a name in the folder: {f!r}")
    return doc


def committed(root: str) -> list[int]:
    """The iterations whose manifest reads, newest first (one process, no collective)."""
    return _survey(root)[0]


def _survey(root: str) -> tuple[list[int], list[str]]:
    """(the iterations whose manifest reads, newest first; why each other folder's does not)."""
    whole, broken = [], []
    for it in iterations(root):
        try:
            read_manifest(root, it)
        except CheckpointError as e:
            broken.append(f"iteration {it}: {e}")
            continue
        whole.append(it)
    return whole, broken


def latest(root: str) -> int | None:
    """The iteration `latest` names, or None when it is missing or unreadable."""
    try:
        with open(os.path.join(root, LATEST)) as f:
            text = f.read().strip()
    except (OSError, UnicodeDecodeError):
        return None
    return int(text) if text.isdigit() else None


def _read_mine(root: str, iteration: int, manifest: dict, rank: int) -> tuple[dict | None, str]:
    """(this rank's shard, '') when its file matches the manifest's size and digest, else (None, why)."""
    entry = next((f for f in manifest["files"] if f.get("rank") == rank), None)
    if entry is None:
        return None, f"iteration {iteration}: the manifest lists no file of rank {rank}"
    path = os.path.join(folder_of(root, iteration), entry["name"])
    try:
        with open(path, "rb") as f:
            data = f.read()
    except OSError as e:
        return None, f"{path}: {e}"
    if len(data) != entry.get("size"):
        return None, f"{path}: {len(data)} bytes, the manifest says {entry.get('size')}"
    if _digest(data) != entry.get("sha256"):
        return None, f"{path}: sha256 differs from the manifest's"
    try:
        return torch.load(io.BytesIO(data), weights_only=True), ""
    except Exception as e:  # torch raises many kinds for a file it cannot read
        return None, f"{path}: {type(e).__name__}: {e}"


def _try(root: str, it: int, rank: int, world: int, layout: str) -> tuple[str, str, dict | None, dict | None]:
    """(ok | damaged | elsewhere, why, this rank's shard, manifest) of `iteration` on this rank."""
    try:
        manifest = read_manifest(root, it)
    except CheckpointError as e:
        return "damaged", str(e), None, None
    if manifest["world_size"] != world or manifest.get("layout") != layout:
        return (
            "elsewhere",
            f"iteration {it} was saved by {manifest['world_size']} ranks on {manifest.get('layout')!r}; this "
            f"job has {world} on {layout!r}: rankckpt loads a checkpoint only where it was saved",
            None,
            None,
        )
    shard, why = _read_mine(root, it, manifest, rank)
    return ("damaged" if why else "ok"), why, shard, manifest


def load(root: str, *, layout: str = "") -> tuple[int, dict, dict, list[str]]:
    """(iteration, this rank's shard, manifest, what was skipped and why) of the newest checkpoint every
    rank can read; every rank calls it. NoCheckpoint when there is none, CheckpointError naming every file
    and check that failed when none can be read, TopologyMismatch when the newest readable one was saved
    elsewhere."""
    rank, world = _rank_and_world()
    candidates, skipped = _from_rank0(_survey(root) if rank == 0 else None, world)
    if not candidates and not skipped:
        raise NoCheckpoint(f"{root}: no checkpoint")
    pointed = latest(root)
    if candidates and pointed != candidates[0]:
        skipped.append(f"{LATEST} names {pointed}, the newest committed iteration is {candidates[0]}")
    for it in candidates:
        kind, why, shard, manifest = _try(root, it, rank, world, layout)
        seen = _gather((kind, why), world)
        refused = next((w for k, w in seen if k == "elsewhere"), None)
        if refused is not None:
            raise TopologyMismatch(refused)
        problems = {r: w for r, (k, w) in enumerate(seen) if k != "ok"}
        if not problems:
            return it, shard, manifest, skipped  # type: ignore[return-value]
        skipped += [f"iteration {it}, rank {r}: {p}" for r, p in problems.items()]
    raise CheckpointError(f"{root}: no checkpoint every rank can read: {'; '.join(skipped)}")
