"""Inspect a checkpoint folder without loading it: every checkpoint, its completeness and integrity.

Reads nothing a loader would not: regular files inside the folder (storage.contained), and DCP's
`.metadata` only through the restricted unpickler, so a hostile checkpoint is reported, never run.
Single process, no torch.distributed: what a user runs on a cluster's checkpoint folder. Global
checkpoints are `DIR/iter_NNNNNNN`; LOCAL ones are `DIR/local/rank_RRRRR/iter_NNNNNNN`, and a LOCAL
iteration counts only when every rank of its topology has one save of it, intact (a re-save keeps the copy
it replaced as `iter_NNNNNNN.replaced-XXXXXXXX`: the copies of the newest save every rank holds are read)."""

from __future__ import annotations

import os
from dataclasses import asdict, dataclass, field

from .. import storage
from ..errors import CheckpointNotFound, ConfigError, IntegrityError
from ..vocab import Combination, on_every_rank
from ..vocab.folders import LOCAL_FOLDER, MANIFEST, RANK_FOLDER, TRACKER, iter_name, rank_root
from . import commit
from .manifest import Manifest, save_number, verify_file

DCP_METADATA = ".metadata"


@dataclass
class Problem:
    """One failed check: which file and which check."""

    path: str
    check: str
    detail: str = ""

    @classmethod
    def from_error(cls, e: IntegrityError) -> Problem:
        return cls(e.path, e.check, e.detail)

    def __str__(self) -> str:
        return f"{self.path}: {self.check} failed" + (f": {self.detail}" if self.detail else "")


@dataclass
class FolderReport:
    """One iter_ folder: a whole global checkpoint, or one rank's part of a LOCAL one."""

    path: str
    iteration: int
    rank: int | None = None  # LOCAL: the rank folder it sits in
    save: int | None = None  # LOCAL: the save's number, alike on every rank (-1: not numbered)
    replaced: bool = False  # LOCAL: a copy a re-save of the iteration replaced and kept
    committed: bool = False  # has a manifest (a save renames its folder into place with one)
    combination: str | None = None
    topology: dict | None = None
    files: int = 0
    bytes: int = 0
    problems: list[Problem] = field(default_factory=list)

    @property
    def verified(self) -> bool:
        return self.committed and not self.problems


@dataclass
class CheckpointReport:
    """One checkpoint: a global folder, or one iteration of a LOCAL checkpoint over all its ranks."""

    layout: str  # "global" or "local"
    iteration: int
    combination: str | None
    topology: dict | None
    complete: bool  # committed (and, LOCAL, present on every rank of its topology)
    verified: bool  # manifest and every listed file passed their checks
    folders: list[FolderReport]
    problems: list[Problem] = field(default_factory=list)

    @property
    def loadable(self) -> bool:
        return self.complete and self.verified

    def to_dict(self) -> dict:
        d = asdict(self)
        d["loadable"] = self.loadable
        for f, folder in zip(d["folders"], self.folders):
            f["verified"] = folder.verified
        return d


@dataclass
class TrackerReport:
    path: str
    iteration: int | None
    problem: Problem | None = None


@dataclass
class Inspection:
    """Everything `resilience inspect` reports about one folder."""

    root: str
    checkpoints: list[CheckpointReport]  # newest first, global before local at equal iteration
    trackers: list[TrackerReport]
    staging: list[str]  # leftovers of interrupted saves

    def newest(self) -> list[CheckpointReport]:
        """The newest checkpoint of each layout present (what a loader tries first)."""
        out: dict[str, CheckpointReport] = {}
        for c in self.checkpoints:
            out.setdefault(c.layout, c)
        return list(out.values())

    @property
    def ok(self) -> bool:
        """The newest checkpoint of every layout present is loadable."""
        return all(c.loadable for c in self.newest())

    def fallback(self, layout: str) -> CheckpointReport | None:
        """The checkpoint a loader would fall back to: the newest loadable one of `layout`."""
        return next((c for c in self.checkpoints if c.layout == layout and c.loadable), None)

    def to_dict(self) -> dict:
        return {
            "root": self.root,
            "ok": self.ok,
            "newest": [{"layout": c.layout, "iteration": c.iteration, "loadable": c.loadable} for c in self.newest()],
            "checkpoints": [c.to_dict() for c in self.checkpoints],
            "trackers": [asdict(t) for t in self.trackers],
            "staging": list(self.staging),
        }


def _combination_text(manifest: Manifest) -> str:
    try:
        return str(Combination.from_dict(manifest.combination))
    except (ConfigError, KeyError, TypeError, AttributeError):
        return f"unknown {manifest.combination!r}"


def inspect_folder(
    path: str, iteration: int, rank: int | None = None, root: str | None = None, replaced: bool = False
) -> FolderReport:
    """Read the manifest of one iter_ folder and verify every file it lists (all failures, not the first).
    Nothing is read from outside `root` (default: the folder holding `path`)."""
    report = FolderReport(path, iteration, rank, replaced=replaced)
    try:
        manifest = Manifest.read(path, root)
    except IntegrityError as e:
        report.committed = e.check not in ("manifest present", "checkpoint folder")  # no manifest, or no folder
        report.problems.append(Problem.from_error(e))
        return report
    except Exception as e:  # whatever a hostile folder does, it is reported, never a traceback
        report.problems.append(Problem(os.path.join(path, MANIFEST), "manifest readable", f"{type(e).__name__}: {e}"))
        return report
    report.committed = True
    report.combination = _combination_text(manifest)
    report.topology = dict(manifest.topology) if isinstance(manifest.topology, dict) else None
    report.files = len(manifest.files)
    report.bytes = sum(f["size"] for f in manifest.files.values())
    if manifest.iteration != iteration:
        report.problems.append(
            Problem(
                os.path.join(path, MANIFEST),
                "iteration",
                f"manifest says {manifest.iteration}, folder says {iteration}",
            )
        )
    if rank is not None:
        try:
            report.save = save_number(manifest, path)
        except IntegrityError as e:
            report.problems.append(Problem.from_error(e))
    if rank is not None and manifest.extra.get("rank", rank) != rank:
        report.problems.append(
            Problem(
                os.path.join(path, MANIFEST),
                "rank",
                f"manifest says rank {manifest.extra.get('rank')}, folder is rank {rank}",
            )
        )
    for rel, expected in sorted(manifest.files.items()):
        try:
            verify_file(path, rel, expected)
        except IntegrityError as e:
            report.problems.append(Problem.from_error(e))
            continue
        except Exception as e:
            report.problems.append(Problem(os.path.join(path, rel), "readable", f"{type(e).__name__}: {e}"))
            continue
        if os.path.basename(rel) == DCP_METADATA:
            problem = _check_dcp_metadata(os.path.join(path, rel))
            if problem is not None:
                report.problems.append(problem)
    return report


def _check_dcp_metadata(path: str) -> Problem | None:
    """DCP's .metadata is a pickle: loadable only if the restricted unpickler admits it (a loader
    refuses it otherwise), and it is never unpickled any other way here."""
    from ..storage.safe_pickle import load_metadata

    try:
        with storage.current().open_read(path) as f:
            load_metadata(f, path)
    except IntegrityError as e:
        return Problem.from_error(e)
    except Exception as e:
        return Problem(path, "metadata parse", f"{type(e).__name__}: {e}")
    return None


def inspect_tracker(root: str, iterations: list[int]) -> TrackerReport:
    tracked, _ = commit.read_tracker(root)
    problem = commit.check_tracker(root, iterations)
    return TrackerReport(os.path.join(root, TRACKER), tracked, Problem.from_error(problem) if problem else None)


def _world(topology: dict | None) -> int | None:
    try:
        return int(topology["tp"]) * int(topology["pp"]) * int(topology["dp"])  # type: ignore[index]  # None: TypeError
    except (KeyError, TypeError, ValueError):
        return None


def _copies_read(iteration: int, folders: list[FolderReport]) -> tuple[list[FolderReport], Problem | None]:
    """The copy of each rank a loader reads: of the newest save every rank holds verified; else each
    rank's committed copy, and the problem when those are different saves."""
    ranks = sorted({f.rank for f in folders if f.rank is not None})
    saves: dict[int, dict[int, FolderReport]] = {r: {} for r in ranks}
    for f in sorted(folders, key=lambda f: f.replaced):  # a committed copy before a kept one of its save
        if f.verified and f.rank is not None and f.save is not None:
            saves[f.rank].setdefault(f.save, f)
    common = on_every_rank(saves.values())
    if common:
        return [saves[r][common[0]] for r in ranks], None
    chosen = [min((f for f in folders if f.rank == r), key=lambda f: (f.replaced, -(f.save or 0))) for r in ranks]
    numbers = {f.save for f in chosen if f.committed and f.save is not None}
    if len(numbers) < 2:
        return chosen, None
    where = os.path.dirname(os.path.dirname(chosen[0].path))
    return chosen, Problem(
        where,
        "ranks agree",
        f"ranks hold different saves of iteration {iteration} "
        f"(save numbers {sorted(numbers)}); none of them on every rank",
    )


def _local_checkpoint(iteration: int, folders: list[FolderReport], rank_roots: dict[int, str]) -> CheckpointReport:
    """One LOCAL iteration: loadable only when every rank of its topology has one save of it, intact."""
    folders, disagree = _copies_read(iteration, folders)
    problems = [p for f in folders for p in f.problems] + ([disagree] if disagree else [])
    combos = {f.combination for f in folders if f.committed and f.combination}
    topos = {tuple(sorted(f.topology.items())) for f in folders if f.committed and f.topology}
    combination = next(iter(combos)) if len(combos) == 1 else None
    topology = next((f.topology for f in folders if f.committed and f.topology), None) if len(topos) == 1 else None
    complete = all(f.committed for f in folders)
    if len(combos) > 1 or len(topos) > 1:
        problems.append(
            Problem(
                os.path.dirname(os.path.dirname(folders[0].path)),
                "ranks agree",
                f"ranks disagree on combination {sorted(combos)} or topology {[dict(t) for t in sorted(topos)]}",
            )
        )
    world = _world(topology)
    if world is not None:
        have = {f.rank for f in folders}
        missing = [r for r in range(world) if r not in have]
        if missing:
            complete = False
            name = iter_name(iteration)
            top = os.path.dirname(os.path.dirname(os.path.dirname(folders[0].path)))  # of ROOT/local/rank_R/iter_N
            where = rank_roots.get(missing[0], rank_root(top, missing[0]))
            problems.append(
                Problem(
                    os.path.join(where, name),
                    "present on every rank",
                    f"missing on rank{'s' if len(missing) > 1 else ''} {', '.join(map(str, missing))} of {world}",
                )
            )
    elif complete:
        complete = False
    verified = all(f.verified for f in folders) and not any(p.check == "ranks agree" for p in problems)
    return CheckpointReport("local", iteration, combination, topology, complete, verified, folders, problems)


def inspect(root: str) -> Inspection:
    """Inspect every checkpoint under `root`. CheckpointNotFound when `root` is missing or holds none."""
    fs = storage.current()
    root = os.path.abspath(root)
    if not fs.exists(root):
        raise CheckpointNotFound(f"{root}: no such folder")
    if not fs.is_dir(root):
        raise CheckpointNotFound(f"{root}: not a folder")
    checkpoints: list[CheckpointReport] = []
    trackers: list[TrackerReport] = []
    staging = commit.stale_staging(root)

    found = commit.list_iterations(root)
    for iteration, path in found:
        f = inspect_folder(path, iteration)
        checkpoints.append(
            CheckpointReport(
                "global", iteration, f.combination, f.topology, f.committed, f.verified, [f], list(f.problems)
            )
        )
    if found:
        trackers.append(inspect_tracker(root, [it for it, _ in found]))

    local = os.path.join(root, LOCAL_FOLDER)
    rank_roots: dict[int, str] = {}
    if fs.is_dir(local):
        for name in fs.listdir(local):
            m = RANK_FOLDER.fullmatch(name)
            if m and fs.is_dir(os.path.join(local, name)):
                rank_roots[int(m.group(1))] = os.path.join(local, name)
    by_iteration: dict[int, list[FolderReport]] = {}
    for rank, folder in sorted(rank_roots.items()):
        its = commit.list_iterations(folder)
        for iteration, path in its:
            by_iteration.setdefault(iteration, []).append(inspect_folder(path, iteration, rank, root))
        for iteration, path in commit.list_replaced(folder):
            by_iteration.setdefault(iteration, []).append(inspect_folder(path, iteration, rank, root, replaced=True))
        if its:
            trackers.append(inspect_tracker(folder, [it for it, _ in its]))
        staging += commit.stale_staging(folder)
    for iteration, folders in by_iteration.items():
        checkpoints.append(_local_checkpoint(iteration, folders, rank_roots))

    if not checkpoints:
        extra = f" ({len(staging)} leftover staging folder(s) of interrupted saves)" if staging else ""
        if fs.exists(os.path.join(root, MANIFEST)):
            extra += "; this looks like one checkpoint's own folder: give the folder that holds it"
        raise CheckpointNotFound(
            f"{root}: no checkpoint found: no iter_NNNNNNN folder here or under local/rank_NNNNN/{extra}"
        )
    checkpoints.sort(key=lambda c: (-c.iteration, c.layout != "global"))
    return Inspection(root, checkpoints, trackers, sorted(staging))
