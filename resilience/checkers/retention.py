"""Retention: no file of the newest acknowledged checkpoint is deleted, truncated or replaced before a
later save is committed or acknowledged.

Read from the file operations the case logged (`Evidence.file_ops`). A file belongs to the save that was
open on the creating rank (invoked there, not yet returned) when it was created; a rename or an exchange
carries it to its new path. A later save counts as acknowledged once it returned on every rank, and,
for the rank that did the operation, once it returned there and was acknowledged in the end (a rank
prunes after its own save returned; the others return on the same collective). It counts as committed
once its last publishing rename ran: the last rename that first carried a file of it into place, over
every rank that publishes by renaming (each rank's rename of its own file, one rename of a folder the
ranks wrote into, a manifest renamed into place after the data files: that rename is the commit), a
tracker's rename left out. A tracker is a path that saves of several iterations rewrite (the root's
latest.txt, a rank folder's latest_checkpointed_iteration.txt), or a root file several saves rewrite;
its replacement as a later save's last step on a rank is that save's commit there, not a loss. One
rank's rename of its own file never commits the save: a library that prunes as soon as its own file is
in place, while the others still write or before its manifest is renamed into place, is a FAIL."""

from __future__ import annotations

import datetime
import math
from typing import Any

from .base import FAIL, NA, PASS, Verdict
from .evidence import Evidence, FileOp, SaveRecord

DESTROYS = ("create", "rename", "unlink", "rmtree")  # what can take a file away (create: truncating one there)


class Retention:
    name = "retention"

    def check(self, ev: Evidence) -> Verdict:
        if ev.file_ops is None:
            return Verdict(self.name, NA, "no file operation log was kept for this case")
        acked = [s for s in ev.saves if s.acknowledged]
        if not acked:
            return Verdict(self.name, NA, "no save was acknowledged")
        judge = _Judge(ev.saves, ev.file_ops)
        for op in ev.file_ops:
            judge.take(op)
        if not any(s.acknowledged for s in judge.seen):
            return Verdict(self.name, NA, "the log saw no file an acknowledged save wrote (its I/O went another way)")
        if judge.bad:
            first = judge.bad[0]
            return Verdict(
                self.name,
                FAIL,
                f"{len(judge.bad)} operation(s) destroyed a file of the newest acknowledged checkpoint; first: "
                f"{first['culprit']}",
                judge.bad,
            )
        if not judge.judged:
            return Verdict(self.name, NA, "no file of an acknowledged checkpoint was deleted, truncated or replaced")
        return Verdict(
            self.name,
            PASS,
            f"{judge.judged} deletion(s), truncation(s) or replacement(s) of acknowledged checkpoints' files, "
            "each after a later save was committed",
        )


def culprits(
    ev: Evidence, iteration: int | None, *, until_job: int | None = None, any_save: bool = False
) -> list[dict]:
    """The logged operations that deleted, truncated or replaced a file of an acknowledged save of
    `iteration` (in jobs up to `until_job`), in time order: who destroyed what a load then missed.
    `any_save`: of any save of it, acknowledged or not (what mixed the files a load read)."""
    if ev.file_ops is None:
        return []
    judge = _Judge(ev.saves, ev.file_ops, any_save=any_save)
    for op in ev.file_ops:
        judge.take(op)
    return [d for d in judge.destroyed if d["iteration"] == iteration and (until_job is None or d["job"] <= until_job)]


def faults_during(ev: Evidence, iteration: int | None, *, until_job: int | None = None) -> list[dict]:
    """The planned faults that fired in a job while a save of `iteration` was open there (invoked on some
    rank, not yet returned on every one), as culprits: what cut, tore or flipped the files it wrote."""
    out = []
    for f in ev.faults_fired:
        t, job = f.get("time"), f.get("job")
        if not isinstance(t, (int, float)) or (until_job is not None and isinstance(job, int) and job > until_job):
            continue
        for s in ev.saved(iteration):
            if s.job != job or not s.invoked_at or t < min(s.invoked_at.values()):
                continue
            if s.returned_at and len(s.returned_at) >= len(s.invoked_at) and t > max(s.returned_at.values()):
                continue
            what = f.get("text") or f.get("kind") or "a fault"
            rank = f.get("rank")
            out.append(
                {
                    "op": "fault",
                    "path": f.get("path"),
                    "rank": rank,
                    "time": _clock(t),
                    "job": job,
                    "save_id": s.save_id,
                    "iteration": s.iteration,
                    "culprit": f"{what}"
                    + (f" on {f['path']}" if f.get("path") else "")
                    + (f" by rank {rank}" if rank is not None else "")
                    + f" at {_clock(t)}, during save {s.save_id} of iteration {s.iteration} in job {job}",
                }
            )
            break
    return out


def first_culprit(items: list[dict]) -> str:
    """'; first culprit: ...' for a verdict's sentence, from the first evidence item that names one."""
    for item in items:
        for c in item.get("culprits") or ():
            if isinstance(c, dict) and c.get("culprit"):
                return f"; first culprit: {c['culprit']}"
    return ""


class _Judge:
    """The file operations in time order: who owns each path, and which destroyed the newest checkpoint."""

    def __init__(self, saves: list[SaveRecord], ops: list[FileOp], *, any_save: bool = False):
        self.saves = saves
        self.any_save = any_save  # `destroyed` lists the files of unacknowledged saves too
        # each save's last create or rename on each rank: a pointer is rewritten last, as the save's commit
        self.last: dict[tuple[str, int | None], float] = {}
        self.makers: dict[str, set[int | None]] = {}  # save id -> the ranks that created files of it
        for o in ops:
            s = self._open_save(o) if o.op in ("create", "rename", "exchange") else None
            if s is not None:
                self.last[(s.save_id, o.rank)] = max(o.time, self.last.get((s.save_id, o.rank), -math.inf))
                if o.op == "create":
                    self.makers.setdefault(s.save_id, set()).add(o.rank)
        self.renamers = _renaming_ranks(ops)  # the ranks that publish their files by renaming them
        self.trackers = self._trackers(ops)
        self.published = self._publish_times(ops)  # (save id, maker) -> its last publishing rename
        self.owner: dict[str, SaveRecord] = {}
        self.judged = 0
        self.seen: list[SaveRecord] = []  # the saves whose files the log saw created
        self.bad: list[dict] = []
        self.destroyed: list[dict] = []  # every file of an acknowledged save taken away, superseded or not

    def take(self, op: FileOp) -> None:
        if op.op in DESTROYS:
            hit = op.dst if op.op == "rename" else op.path
            by = self._replacing(op)
            for path in self._under(hit):
                owner = self.owner.pop(path)
                if by is not None and self._is_pointer_update(op, path, hit, owner, by):
                    continue
                self._destroyed(op, path, owner)
        if op.op == "create":
            save = self._open_save(op)
            if save is not None:
                self.owner[op.path] = save
                self.seen.append(save)
        elif op.op in ("rename", "exchange"):
            self._move(op)

    def _replacing(self, op: FileOp) -> SaveRecord | None:
        """The save whose file takes the path's place: the creating save, or the renamed file's owner."""
        if op.op == "create":
            return self._open_save(op)
        return self.owner.get(op.path) if op.op == "rename" else None

    def _is_pointer_update(self, op: FileOp, path: str, hit: str, owner: SaveRecord, by: SaveRecord) -> bool:
        """A tracker replaced by a later save as that save's last step on the rank: its commit, not a loss.
        In place (open for writing) only at the root (Megatron's tracker); a rank folder's tracker by a rename."""
        return (
            path == hit
            and by.save_id != owner.save_id
            and self.last.get((by.save_id, op.rank)) == op.time
            and ("/" not in path or (op.op == "rename" and path in self.trackers))
        )

    def _trackers(self, ops: list[FileOp]) -> set[str]:
        """The paths that saves of two or more iterations created or renamed a file to, and the files at the
        root that two or more saves did (a pointer rewritten by re-saves of one iteration)."""
        wrote: dict[str, set[tuple[str, int | None]]] = {}  # path -> (save id, iteration) of each writer
        for o in ops:
            s = self._open_save(o) if o.op in ("create", "rename") else None
            if s is not None:
                wrote.setdefault(o.dst if o.op == "rename" else o.path, set()).add((s.save_id, s.iteration))
        return {p for p, by in wrote.items() if len({it for _, it in by}) > 1 or ("/" not in p and len(by) > 1)}

    def _publish_times(self, ops: list[FileOp]) -> dict[tuple[str, int | None], float]:
        """When each save's files of each maker were last carried into place for the first time: a rename
        (not to a tracker) that moved a file no rename had moved before. A later move of published files
        (a re-save setting the old copy aside) publishes nothing."""
        files: dict[str, tuple[str, int | None, bool]] = {}  # path -> (save id, maker, published)
        out: dict[tuple[str, int | None], float] = {}
        for o in ops:
            if o.op == "create":
                s = self._open_save(o)
                if s is not None:
                    files[o.path] = (s.save_id, o.rank, False)
            elif o.op in ("unlink", "rmtree"):
                for p in [p for p in files if p == o.path or p.startswith(o.path + "/")]:
                    del files[p]
            elif o.op in ("rename", "exchange"):
                sides = [(o.path, o.dst)] + ([(o.dst, o.path)] if o.op == "exchange" else [])
                moved = {
                    dst + p[len(src) :]: files.pop(p)
                    for src, dst in sides
                    for p in [p for p in files if p == src or p.startswith(src + "/")]
                }
                for p, (sid, maker, done) in moved.items():
                    if not done and p not in self.trackers:
                        out[(sid, maker)] = max(o.time, out.get((sid, maker), -math.inf))
                    files[p] = (sid, maker, True)
        return out

    def _move(self, op: FileOp) -> None:
        there = {p: self.owner.pop(p) for p in self._under(op.path)}
        back = {p: self.owner.pop(p) for p in self._under(op.dst)} if op.op == "exchange" else {}
        for moved, src, dst in ((there, op.path, op.dst), (back, op.dst, op.path)):
            for p, save in moved.items():
                self.owner[dst + p[len(src) :]] = save

    def _under(self, path: str) -> list[str]:
        return [p for p in self.owner if p == path or p.startswith(path + "/")]

    def _open_save(self, op: FileOp) -> SaveRecord | None:
        """The save open on the creating rank when the file was created. Async saves overlap: the next one
        is invoked while the last one's writer still writes, and waits for it first, so of two open saves
        the earlier invoked one is the file's. A save that never returned on the rank is open until the
        rank's next save was invoked."""
        open_ = [
            s
            for s in self.saves
            if s.job == op.job
            and op.rank in s.invoked_at
            and s.invoked_at[op.rank] <= op.time <= self._closed(s, op.rank)
        ]
        return min(open_, key=lambda s: s.invoked_at[op.rank], default=None)  # type: ignore[index]

    def _closed(self, save: SaveRecord, rank: int) -> float:
        if rank in save.returned_at:
            return save.returned_at[rank]
        start = save.invoked_at[rank]
        later = [
            s.invoked_at[rank]
            for s in self.saves
            if s.job == save.job and rank in s.invoked_at and s.invoked_at[rank] > start
        ]
        return min(later, default=math.inf)

    def _destroyed(self, op: FileOp, path: str, save: SaveRecord) -> None:
        acked_at = _acknowledged_at(save)
        if acked_at is None or acked_at > op.time:
            if self.any_save:  # not acknowledged (yet): named, never judged
                said = f"{op} at {_clock(op.time)} destroyed {path} of iteration {save.iteration} (save {save.save_id})"
                self.destroyed.append(self._entry(op, path, save, said + ", not acknowledged then"))
            return  # not acknowledged yet: nothing a caller was promised
        self.judged += 1
        culprit = (
            f"{op} at {_clock(op.time)} destroyed {path} of iteration {save.iteration} "
            f"(save {save.save_id}), acknowledged {op.time - acked_at:.3f} s before"
        )
        entry = self._entry(op, path, save, culprit)
        self.destroyed.append(entry)
        if any(self._supersedes(later, save, op) for later in self.saves):
            return
        self.bad.append(dict(entry, culprit=culprit + " and still the newest acknowledged checkpoint"))

    @staticmethod
    def _entry(op: FileOp, path: str, save: SaveRecord, culprit: str) -> dict[str, Any]:
        entry: dict[str, Any] = {
            "op": op.op,
            "path": path,
            "via": op.path if op.op != "rename" else f"{op.path} -> {op.dst}",
            "rank": op.rank,
            "pid": op.pid,
            "thread": f"{op.thread} {op.named_thread}" if op.named_thread else op.thread,
            "time": _clock(op.time),
            "job": op.job,
            "save_id": save.save_id,
            "iteration": save.iteration,
            "culprit": culprit,
        }
        return entry

    def _supersedes(self, later: SaveRecord, save: SaveRecord, op: FileOp) -> bool:
        """Whether `later`, a save invoked after `save`, was committed or acknowledged when `op` ran."""
        if later is save or _first_invoke(later) <= _first_invoke(save):
            return False
        acked_at = _acknowledged_at(later)
        if acked_at is not None and acked_at <= op.time:
            return True
        if later.acknowledged and later.returned_at.get(op.rank, math.inf) <= op.time:  # type: ignore[arg-type]
            return True
        return self._committed(later) <= op.time

    def _committed(self, later: SaveRecord) -> float:
        """When `later` was committed: the last publishing rename of the ranks that publish by renaming
        and made files of it (inf: never by a rename)."""
        need = self.makers.get(later.save_id, set()) & self.renamers
        return max((self.published.get((later.save_id, m), math.inf) for m in need), default=math.inf)


def _renaming_ranks(ops: list[FileOp]) -> set[int | None]:
    """The ranks some of whose created files a rename or an exchange carried, anywhere in the log."""
    maker: dict[str, int | None] = {}
    out: set[int | None] = set()
    for o in ops:
        if o.op == "create":
            maker[o.path] = o.rank
        elif o.op in ("rename", "exchange"):
            sides = (o.path, o.dst) if o.op == "exchange" else (o.path,)
            out |= {r for p, r in maker.items() if any(p == s or p.startswith(s + "/") for s in sides)}
    return out


def _acknowledged_at(save: SaveRecord) -> float | None:
    """When the save had returned on every rank (None: it never did)."""
    if not save.acknowledged or not save.returned_at:
        return None
    return max(save.returned_at.values())


def _first_invoke(save: SaveRecord) -> float:
    return min(save.invoked_at.values(), default=math.inf)


def _clock(t: float) -> str:
    return datetime.datetime.fromtimestamp(t).strftime("%H:%M:%S.%f")[:-3]
