"""Crash states after a power loss, built from the operation log (ALICE / CrashMonkey style, pure Python).

Model. The folder before the save (a Snapshot) is durable. Replaying the logged operations of every rank
in order gives effects on objects: data effects on a file (truncate, write) and entry effects on a
folder (add or remove a name). Which effects are durable at the crash, and which sets of the others may
land, is the persistence model's rule (resilience.faults.persistence: ext4 data=ordered by default, or
the POSIX minimum). Objects keep their type, a rename lands whole or not at all. Every crash state holds
all durable effects plus some of the unsynced ones (grown to what the model forces), applied in order:
  fsynced only; everything; in-order prefixes of the unsynced operations (CrashMonkey); each prefix whose
  last write is torn (its first half lands); all but one (one operation overtaken by later ones); only one;
  then random subsets drawn from the seed.
Enumeration stops at `max_states` distinct states; each is materialised as a copy in its own folder."""

from __future__ import annotations

import os
import random
import shutil
from collections.abc import Iterator
from dataclasses import dataclass, field

from .oplog import Blobs, Op, read_ops
from .persistence import PersistenceModel, persistence_model

ROOT = "d:."


@dataclass(frozen=True)
class Snapshot:
    """The folder's durable contents before the save: a copy of it at `copy`, for the folder at `root`."""

    root: str
    copy: str | None

    @classmethod
    def take(cls, root: str | os.PathLike, into: str | os.PathLike) -> Snapshot:
        """Copy `root` (if it exists) to `into`."""
        root, into = os.path.abspath(str(root)), os.path.abspath(str(into))
        if os.path.isdir(root):
            shutil.copytree(root, into, symlinks=True)
        else:
            os.makedirs(into)
        return cls(root, into)

    @classmethod
    def empty(cls, root: str | os.PathLike) -> Snapshot:
        """The folder was empty (or absent) before the save."""
        return cls(os.path.abspath(str(root)), None)


@dataclass(frozen=True)
class CrashState:
    """One possible disk after the power loss, materialised at `path` (use it as the checkpoint root)."""

    index: int
    path: str
    how: str
    persisted: tuple[int, ...]  # indices (into CrashStates.ops) of the unsynced operations that landed
    torn: int | None = None  # index of the write that landed torn

    def to_dict(self) -> dict:
        return {
            "index": self.index,
            "path": self.path,
            "how": self.how,
            "persisted": list(self.persisted),
            "torn": self.torn,
        }


@dataclass
class CrashStates:
    states: list[CrashState]
    explored: int  # candidate states generated (duplicates included)
    ops: list[Op]  # the operations under the folder, in order
    unsynced: list[int]  # which of them were not durable at the crash
    bounded: bool  # enumeration stopped at max_states
    ignored: int = 0  # operations outside the folder or on paths it never held
    notes: list[str] = field(default_factory=list)
    model: str = "ext4_ordered"  # the persistence model the states obey

    def summary(self) -> str:
        return (
            f"{len(self.states)} distinct crash states materialised ({self.model}), {self.explored} explored, "
            f"from {len(self.ops)} operations ({len(self.unsynced)} not durable at the crash)"
            + (", stopped at max_states" if self.bounded else "")
        )

    def to_dict(self) -> dict:
        return {
            "states": [s.to_dict() for s in self.states],
            "explored": self.explored,
            "operations": len(self.ops),
            "unsynced": [str(self.ops[i]) for i in self.unsynced],
            "bounded": self.bounded,
            "ignored": self.ignored,
            "model": self.model,
        }


@dataclass
class _Step:
    """The effects of one operation, and the objects whose sync makes it durable."""

    effects: list[tuple] = field(default_factory=list)
    syncs: str | None = None  # this op is an fsync of that object
    replaces: str | None = None  # a rename over an existing file: the id of the file moved

    @property
    def objects(self) -> set[str]:
        return {e[1] for e in self.effects}


class _Model:
    """Folders (id -> {name: id}) and the kinds of objects; ids: d:/f: for snapshot entries, n<k> for new."""

    def __init__(self, snapshot: Snapshot):
        self.dirs: dict[str, dict[str, str]] = {ROOT: {}}
        self.origin: dict[str, str] = {}  # file id -> its pre-save copy
        self.new_dirs: set[str] = set()  # folders the logged operations made
        if snapshot.copy:
            for dirpath, dirnames, filenames in os.walk(snapshot.copy):
                rel = os.path.relpath(dirpath, snapshot.copy)
                parent = self.dirs[f"d:{rel}"]
                for d in dirnames:
                    child = os.path.normpath(os.path.join(rel, d))
                    parent[d] = f"d:{child}"
                    self.dirs[f"d:{child}"] = {}
                for f in filenames:
                    child = os.path.normpath(os.path.join(rel, f))
                    parent[f] = f"f:{child}"
                    self.origin[f"f:{child}"] = os.path.join(snapshot.copy, child)

    def copy_entries(self) -> dict[str, dict[str, str]]:
        return {k: dict(v) for k, v in self.dirs.items()}


def _split(root: str, path: str) -> list[str] | None:
    rel = os.path.relpath(os.path.abspath(path), root)
    if rel == ".":
        return []
    if rel.startswith(".."):
        return None
    return rel.split(os.sep)


def _replay(snapshot: Snapshot, ops: list[Op]) -> tuple[_Model, list[_Step], int]:
    """Pass 1: resolve each operation against the state it ran on; its effects on objects."""
    model = _Model(snapshot)
    dirs = model.copy_entries()
    streams: dict[str | None, str] = {}
    steps, ignored = [], 0

    def lookup(parts):
        node = ROOT
        for name in parts:
            if node not in dirs or name not in dirs[node]:
                return None
            node = dirs[node][name]
        return node

    def parent_of(path):
        parts = _split(snapshot.root, path)
        if not parts:
            return None, None
        parent = lookup(parts[:-1])
        return (parent, parts[-1]) if parent in dirs else (None, None)

    for k, op in enumerate(ops):
        step = _Step()
        if op.op in ("create", "mkdir"):
            parent, name = parent_of(op.path)
            if parent is not None:
                existing = dirs[parent].get(name)
                if op.op == "create" and existing is not None and existing not in dirs:
                    step.effects.append(("trunc", existing))
                    streams[op.stream] = existing
                elif existing is None:
                    new = f"n{k}"
                    if op.op == "mkdir":
                        dirs[new] = {}
                        model.new_dirs.add(new)
                    else:
                        streams[op.stream] = new
                    step.effects.append(("add", parent, name, new))
        elif op.op == "write":
            obj = streams.get(op.stream)
            if obj is not None:
                step.effects.append(("write", obj, op.offset, k))
        elif op.op == "fsync":
            step.syncs = streams.get(op.stream)
        elif op.op == "fsync_dir":
            parts = _split(snapshot.root, op.path)
            step.syncs = lookup(parts) if parts is not None else None
        elif op.op == "rename":
            (p1, n1), (p2, n2) = parent_of(op.path), parent_of(op.dst)
            obj = dirs[p1].get(n1) if p1 is not None else None
            if obj is not None and p2 is not None and (p1, n1) != (p2, n2):
                step.effects += [("del", p1, n1), ("add", p2, n2, obj)]
                replaced = dirs[p2].get(n2)
                if replaced is not None and replaced not in dirs and obj not in dirs:
                    step.replaces = obj
        elif op.op == "exchange":
            (pa, na), (pb, nb) = parent_of(op.path), parent_of(op.dst)
            a = dirs[pa].get(na) if pa is not None else None
            b = dirs[pb].get(nb) if pb is not None else None
            if a is not None and b is not None:
                step.effects += [("add", pa, na, b), ("add", pb, nb, a)]
        elif op.op in ("unlink", "rmtree"):
            parent, name = parent_of(op.path)
            if parent is not None and name in dirs[parent]:
                step.effects.append(("del", parent, name))
        if not step.effects and step.syncs is None and op.op != "close":
            ignored += 1
        for e in step.effects:
            _apply_entry(dirs, e)
        steps.append(step)
    return model, steps, ignored


def _apply_entry(dirs: dict, e: tuple) -> None:
    if e[0] == "add":
        dirs.setdefault(e[1], {})[e[2]] = e[3]
    elif e[0] == "del":
        dirs.get(e[1], {}).pop(e[2], None)


def _spread(n: int) -> list[int]:
    """1..n-1 in an order that covers the range evenly early (midpoints first)."""
    out, seen, level = [], set(), [(1, n - 1)]
    while level:
        nxt = []
        for lo, hi in level:
            if lo > hi:
                continue
            mid = (lo + hi + 1) // 2
            if mid not in seen:
                seen.add(mid)
                out.append(mid)
            nxt += [(lo, mid - 1), (mid + 1, hi)]
        level = nxt
    return out


def _candidates(
    unsynced: list[int], writes: set[int], ops: list[Op], torn: bool, rng: random.Random
) -> Iterator[tuple[frozenset, int | None, str]]:
    n = len(unsynced)
    yield frozenset(), None, "fsynced only"
    if not n:
        return
    yield frozenset(unsynced), None, "every operation landed"

    def prefixes():
        for k in _spread(n):
            yield frozenset(unsynced[:k]), None, f"in-order prefix: first {k} of {n} unsynced operations"

    def torn_prefixes():
        if torn:
            for k in [n] + _spread(n):
                if unsynced[k - 1] in writes:
                    yield (
                        frozenset(unsynced[: k - 1]),
                        unsynced[k - 1],
                        f"first {k - 1} of {n} landed, then {ops[unsynced[k - 1]]} torn",
                    )

    def all_but_one():
        for j in [0] + _spread(n):
            yield frozenset(unsynced) - {unsynced[j]}, None, f"all but {ops[unsynced[j]]}"

    def only_one():
        for j in [0] + _spread(n):
            yield frozenset({unsynced[j]}), None, f"only {ops[unsynced[j]]}"

    gens = [prefixes(), torn_prefixes(), all_but_one(), only_one()]
    while gens:
        for g in list(gens):
            item = next(g, None)
            if item is None:
                gens.remove(g)
            else:
                yield item
    while True:
        chosen = frozenset(u for u in unsynced if rng.random() < 0.5)
        cut = None
        if torn and rng.random() < 0.3:
            w = [u for u in unsynced if u in writes and u not in chosen]
            cut = rng.choice(w) if w else None
        yield chosen, cut, "random subset" + (" with a torn write" if cut is not None else "")


def _state(model: _Model, steps: list[_Step], durable: list[bool], persisted: frozenset, torn: int | None):
    """Pass 2: folders and, per file, the data effects that landed."""
    dirs = model.copy_entries()
    data: dict[str, list[tuple]] = {}
    for k, s in enumerate(steps):
        if not (durable[k] or k in persisted or k == torn):
            continue
        for e in s.effects:
            if e[0] in ("add", "del"):
                _apply_entry(dirs, e)
                if e[0] == "add" and e[3] in model.new_dirs:
                    dirs.setdefault(e[3], {})  # a folder stays a folder, also with none of its entries landed
                if e[0] == "add" and e[3] not in dirs and e[3].startswith("n"):
                    data.setdefault(e[3], [])
            elif e[0] == "trunc":
                data.setdefault(e[1], []).append(("trunc",))
            else:
                data.setdefault(e[1], []).append(("write", e[2], e[3], k == torn))
    return dirs, data


def _walk(dirs: dict, node: str = ROOT, prefix: str = "", seen: frozenset = frozenset()) -> Iterator[tuple[str, str]]:
    """(relative path, object id) of every reachable entry; a folder moved into itself is cut off."""
    for name, obj in sorted(dirs.get(node, {}).items()):
        rel = os.path.join(prefix, name)
        yield rel, obj
        if obj in dirs and obj not in seen:
            yield from _walk(dirs, obj, rel, seen | {node})


def _signature(dirs: dict, data: dict) -> tuple:
    return tuple((rel, "dir") if obj in dirs else (rel, obj, tuple(data.get(obj, ()))) for rel, obj in _walk(dirs))


def _materialise(model: _Model, dirs: dict, data: dict, ops: list[Op], blobs: Blobs, out: str) -> None:
    os.makedirs(out)
    for rel, obj in _walk(dirs):
        path = os.path.join(out, rel)
        if obj in dirs:
            os.makedirs(path, exist_ok=True)
            continue
        effects = data.get(obj, ())
        if not effects:
            if obj in model.origin:
                shutil.copyfile(model.origin[obj], path)
            else:
                open(path, "wb").close()
            continue
        content = bytearray()
        if obj in model.origin:
            with open(model.origin[obj], "rb") as f:
                content += f.read()
        for e in effects:  # in memory, then one write: as pwrite would leave it (a gap reads as zeros)
            if e[0] == "trunc":
                content.clear()
                continue
            _, offset, k, is_torn = e
            blob = blobs.of(ops[k])
            if is_torn:
                blob = blob[: len(blob) // 2]
            if offset > len(content):
                content += bytes(offset - len(content))
            content[offset : offset + len(blob)] = blob
        with open(path, "wb") as f:
            f.write(content)


def crash_states(
    snapshot: Snapshot,
    oplog_dir: str | os.PathLike,
    out_dir: str | os.PathLike,
    *,
    max_states: int = 32,
    seed: int = 0,
    torn: bool = True,
    model: str | PersistenceModel | None = None,
) -> CrashStates:
    """Build up to `max_states` distinct on-disk states of `snapshot.root` after a power loss at the end
    of the logged operations, each one the persistence `model` allows (default ext4_ordered);
    materialise each in out_dir/state_NNNN (a checkpoint root to load from)."""
    rule = persistence_model(model)
    oplog_dir, out_dir = str(oplog_dir), str(out_dir)
    ops = [
        op
        for op in read_ops(oplog_dir)
        if _split(snapshot.root, op.path) is not None
        or (op.dst is not None and _split(snapshot.root, op.dst) is not None)
    ]
    fs_model, steps, ignored = _replay(snapshot, ops)
    durable = rule.durable(steps)
    unsynced = [k for k, s in enumerate(steps) if s.effects and not durable[k]]
    writes = {k for k in unsynced if any(e[0] == "write" for e in steps[k].effects)}
    rng = random.Random(seed)
    os.makedirs(out_dir, exist_ok=True)
    seen: set = set()
    blobs = Blobs(oplog_dir)
    states: list[CrashState] = []
    explored, misses = 0, 0
    for persisted, cut, how in _candidates(unsynced, writes, ops, torn, rng):
        if len(states) >= max_states or misses > 4 * max_states:
            break
        explored += 1
        persisted = rule.close(steps, durable, persisted)
        if cut is not None and (cut in persisted or not rule.obeys(steps, durable, persisted | {cut})):
            cut = None  # the model makes that write land whole, or forbids it landing here at all
        dirs, data = _state(fs_model, steps, durable, persisted, cut)
        sig = _signature(dirs, data)
        if sig in seen:
            misses += 1
            continue
        seen.add(sig)
        path = os.path.join(out_dir, f"state_{len(states):04d}")
        _materialise(fs_model, dirs, data, ops, blobs, path)
        states.append(CrashState(len(states), path, how, tuple(sorted(persisted)), cut))
    bounded = len(states) >= max_states and bool(unsynced)
    return CrashStates(states, explored, ops, unsynced, bounded, ignored, model=rule.name)


def power_loss_states(fault, snapshot: Snapshot, oplog_dir, out_dir) -> CrashStates:
    """crash_states with the bounds of a LostUnsyncedWrites fault (max_states, torn, seed, persistence)."""
    return crash_states(
        snapshot,
        oplog_dir,
        out_dir,
        max_states=fault.max_states,
        seed=fault.seed,
        torn=fault.torn,
        model=getattr(fault, "persistence", None),
    )
