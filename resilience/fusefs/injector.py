"""The seam's fault records, carried out inside the file system.

The records are the ones resilience.faults parses (faults_from), and which record counts which operation
is the seam's own rule (faults.inject._op_triggered), read through the FUSE -> seam mapping of base.py.
Counts are kept per rank, as each rank's injector keeps its own in process: `nth: 3` aimed at ranks 0
and 1 fires on the third matching operation of each. A fault only reaches callers that belong to a rank
it targets (no target.rank: every rank); the runner's own reads and copies through the mount never see
one, and a crash never kills a process that belongs to no rank.

A crash at a byte is armed by the nth matching open for writing, as the seam arms it at open_write, and
cuts the write request that reaches the byte: the file holds exactly that many bytes when the rank dies.

A record may be armed late, as the seam arms it at a rank operation: `arm_at[i]` is the index of the rank
operation from which record i counts (None: from the mount on), and each rank says when it reaches an
index (`armed`, told through the control names of base.py). Before that the record sees nothing of
that rank, so `nth` counts from the same point either way in.

Pure decisions, no I/O but the firing report: the file system (passthrough.py) sleeps, fails, writes and
kills as told, in the seam's order: slow, fail with an errno, crash before, do (a write maybe short,
torn or cut at a byte), log, crash after. Phase triggers are announced by checkpoint code in process,
which a file system cannot hear: such records are left to the in-process injector."""

from __future__ import annotations

import random
import threading
from collections.abc import Iterable
from dataclasses import dataclass, field

from ..faults.base import Fault, faults_from, matches_path
from ..faults.firings import FaultReport, firing
from ..faults.inject import _is_crash, _op_triggered
from ..faults.kinds import IOFailure, LostUnsyncedWrites, ShortWrite, SlowWrite, TornWrite
from .base import Caller

VIA = "fuse"  # every firing says which way in carried it


@dataclass
class Plan:
    """What the faults decided for one request."""

    hits: list[tuple[int, int]] = field(default_factory=list)  # (fault index, its count of this rank's ops)
    delay: float = 0.0  # sleep this long first
    error: IOFailure | None = None  # then fail with this errno (fired)
    crash: Fault | None = None  # or crash before the operation (fired; RankCrash or LostUnsyncedWrites)
    keep: int | None = None  # a write stores only this many bytes and says so (short)
    torn: tuple[TornWrite, int] | None = None  # a write stores `keep` bytes, fills the rest, says all (torn)


class FuseInjector:
    """The in-process injector's decisions, for every rank at once."""

    def __init__(
        self, faults: Iterable, *, report: FaultReport | None = None, arm_at: Iterable[int | None] | None = None
    ):
        parsed = faults_from(list(faults))
        arms = list(arm_at) if arm_at is not None else [None] * len(parsed)
        if len(arms) != len(parsed):
            raise ValueError(f"{len(arms)} arming points for {len(parsed)} fault records")
        kept = [(f, a) for f, a in zip(parsed, arms) if carries_out(f)]
        self.faults = [f for f, _ in kept]
        self.arm_at = [a for _, a in kept]
        self.report = report
        self._reached: dict[int, int] = {}  # rank -> the last rank operation index it announced
        self._count: dict[tuple[int, int], int] = {}
        self._slowed: dict[tuple[int, int], int] = {}
        self._done: set[tuple[int, int]] = set()
        self._fired: list[dict] = []
        self._lock = threading.Lock()

    @property
    def has_power_loss(self) -> bool:
        return any(isinstance(f, LostUnsyncedWrites) for f in self.faults)

    def firings(self) -> list[dict]:
        return list(self._fired)

    def fire(self, i: int, caller: Caller | None, action: str, **detail) -> dict:
        f = self.faults[i]
        who = {} if caller is None else {"rank": caller.rank, "thread": caller.thread, "pid": caller.tgid}
        rec = firing(f, action, via=VIA, **who, **detail)
        with self._lock:
            self._fired.append(rec)
            if caller is not None and caller.rank is not None:
                self._done.add((i, caller.rank))
        if self.report is not None:
            self.report.append(rec)
        return rec

    def reached(self, rank: int, index: int) -> None:
        """Rank `rank` begins its operation `index`: the records armed there count its operations from now."""
        with self._lock:
            self._reached[rank] = max(index, self._reached.get(rank, -1))

    def _armed(self, i: int, rank: int) -> bool:
        at = self.arm_at[i]
        return at is None or self._reached.get(rank, -1) >= at

    def _applies(self, f: Fault, caller: Caller, path: str) -> bool:
        if caller.rank is None or not f.target.has_rank(caller.rank):
            return False
        return matches_path(f.target.path, path) and f.target.thread in (None, caller.thread)

    def _hits(self, caller: Caller, op: str | None, paths: tuple[str, ...]) -> list[tuple[int, int]]:
        hits: list[tuple[int, int]] = []
        if caller.rank is None or op is None:  # an operation the seam has no word for is never counted
            return hits
        with self._lock:
            for i, f in enumerate(self.faults):
                key = (i, caller.rank)
                if not _op_triggered(f, op) or not self._armed(i, caller.rank):
                    continue
                if not any(self._applies(f, caller, p) for p in paths):
                    continue
                if key in self._done and not isinstance(f, SlowWrite):
                    continue
                self._count[key] = self._count.get(key, 0) + 1
                hits.append((i, self._count[key]))
        return hits

    def before(self, caller: Caller, op: str | None, paths: tuple[str, ...], *, length: int = 0, **where) -> Plan:
        """Count this request against every fault; say what to do before (and, for a write, while) doing
        it. `op` is the seam operation (base.seam_op); `where` goes into the firings."""
        plan = Plan(self._hits(caller, op, paths))
        where = {"op": op, "path": paths[0], **({"dst": paths[1]} if len(paths) > 1 else {}), **where}
        for i, n in plan.hits:
            f = self.faults[i]
            if isinstance(f, SlowWrite) and n >= f.trigger.nth and caller.rank is not None:
                key = (i, caller.rank)
                with self._lock:
                    slowed = self._slowed.get(key, 0)
                    if f.times is not None and slowed >= f.times:
                        continue
                    self._slowed[key] = slowed + 1
                if not slowed:
                    self.fire(i, caller, "slow", delay=f.delay, **where)
                plan.delay += f.delay
        for i, n in plan.hits:
            f = self.faults[i]
            if isinstance(f, IOFailure) and n == f.trigger.nth:
                self.fire(i, caller, f"raise {f.errno}", errno=f.errno, **where)
                plan.error = f
                return plan
        for i, n in plan.hits:
            f = self.faults[i]
            if _is_crash(f) and f.trigger.when == "before" and f.trigger.at_byte is None and n == f.trigger.nth:
                self.fire(i, caller, crash_action(f), when="before", **where)
                plan.crash = f
                return plan
        if op == "write":
            for i, n in plan.hits:
                f = self.faults[i]
                if isinstance(f, (ShortWrite, TornWrite)) and n == f.trigger.nth:
                    k = min(length, length // 2 if f.keep is None else f.keep)
                    if isinstance(f, ShortWrite):
                        plan.keep = k if plan.keep is None else min(plan.keep, k)
                        self.fire(i, caller, "short", length=length, kept=k, **where)
                    else:
                        plan.torn = (f, k)
                        self.fire(i, caller, "torn", length=length, kept=k, fill=f.fill, **where)
        return plan

    def after(self, caller: Caller, op: str | None, paths: tuple[str, ...], plan: Plan, **where) -> Fault | None:
        """A crash due right after the operation (fired), if any."""
        for i, n in plan.hits:
            f = self.faults[i]
            if _is_crash(f) and f.trigger.when == "after" and f.trigger.at_byte is None and n == f.trigger.nth:
                self.fire(
                    i,
                    caller,
                    crash_action(f),
                    when="after",
                    op=op,
                    path=paths[0],
                    **({"dst": paths[1]} if len(paths) > 1 else {}),
                    **where,
                )
                return f
        return None

    def arm(self, caller: Caller, path: str) -> list[int]:
        """An open for writing: the at_byte crashes whose nth matching file this is (indices)."""
        armed: list[int] = []
        if caller.rank is None:
            return armed
        with self._lock:
            for i, f in enumerate(self.faults):
                key = (i, caller.rank)
                if not _is_crash(f) or f.trigger.at_byte is None or key in self._done:
                    continue
                if not self._armed(i, caller.rank):
                    continue
                if self._applies(f, caller, path):
                    self._count[key] = self._count.get(key, 0) + 1
                    if self._count[key] == f.trigger.nth:
                        armed.append(i)
        return armed

    def cut(self, armed: list[int], offset: int, length: int) -> tuple[int, int] | None:
        """(fault index, bytes of this write to keep) when a write from `offset` reaches an armed at_byte."""
        for i in armed:
            at = self.faults[i].trigger.at_byte
            assert at is not None
            if offset < at <= offset + length:
                return i, at - offset
        return None

    def close(self, ranks: Iterable[int]) -> None:
        """Unmount: a lost_unsynced_writes record with no crash point fires now, after the last operation,
        once per rank of the map it targets that armed it (the runner then builds the crash states)."""
        ranks = sorted(ranks)
        for i, f in enumerate(self.faults):
            if not isinstance(f, LostUnsyncedWrites) or f.target.op is not None or f.trigger.at_byte is not None:
                continue
            if any(i == j for j, _ in self._done):
                continue
            targeted: list[int | None] = [r for r in ranks if f.target.has_rank(r)] or [None]
            targeted = [r for r in targeted if r is None or self._armed(i, r)]
            for r in targeted:
                self.fire(i, None if r is None else Caller(0, 0, r), "power_loss", when="after the last operation")


def carries_out(f: Fault) -> bool:
    """Whether the file system can carry out a fault: one the in-process injector would, not at a phase
    (phases are announced by checkpoint code in process; a file system cannot hear them)."""
    return f.layer == "inject" and f.trigger.phase is None


def crash_action(f: Fault) -> str:
    """What a crash record's firing says it did: the seam's words."""
    return "power_loss" if isinstance(f, LostUnsyncedWrites) else "sigkill"


def torn_fill(f: TornWrite, length: int) -> bytes:
    """What lands after the kept bytes of a torn write, as the seam writes it."""
    return bytes(length) if f.fill == "zeros" else random.Random(f.seed).randbytes(length)


__all__ = ["FuseInjector", "Plan", "VIA", "carries_out", "crash_action", "torn_fill"]
