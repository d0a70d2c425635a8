"""The seam's fault records, carried out inside the file system.

The records are the ones resilience.faults parses (faults_from); which record fires on which request is
resilience.triggers' decision, the same rules the in-process injector follows, read through the FUSE ->
seam mapping of base.py. Counts are kept per rank, as each rank's injector keeps its own in process:
`nth: 3` aimed at ranks 0 and 1 fires on the third matching operation of each. A fault only reaches
callers that belong to a rank it targets (no target.rank: every rank); the runner's own reads and copies
through the mount never see one, and a crash never kills a process that belongs to no rank.

A crash at a byte is armed by the nth matching open for writing, as the seam arms it at open_write, and
cuts the write request that reaches the byte: the file holds exactly that many bytes when the rank dies.

A record may be armed late, as the seam arms it at a rank operation: `arm_at[i]` is the index of the rank
operation from which record i counts (None: from the mount on), and each rank says when it reaches an
index (`reached`, told through the control names of base.py). Before that the record sees nothing of
that rank, so `nth` counts from the same point either way in.

No I/O but the firing report: the file system (passthrough.py) sleeps, fails, writes and kills as the
decision says, in the seam's order: slow, fail with an errno, crash before, do (a write maybe short,
torn or cut at a byte), log, crash after. Phase triggers are announced by checkpoint code in process,
which a file system cannot hear: such records are left to the in-process injector (`CARRIES`)."""

from __future__ import annotations

import threading
from collections.abc import Iterable

from ..faults.base import OPS, Fault, faults_from
from ..faults.firings import FaultReport, firing
from ..triggers import FILE_EFFECTS, POWER_LOSS, Carries, Decision, Matcher, crash_action
from .words import Caller

VIA = "fuse"  # every firing says which way in carried it


class FuseInjector:
    """The decisions of resilience.triggers for every rank at once, and the firings they make."""

    # every effect on a file, but not at a phase (phases are announced by checkpoint code in process); no
    # effect on an object store's requests, which a proxy in front of its server carries
    CARRIES = Carries("fuse", frozenset(FILE_EFFECTS), phases=False, ops=frozenset(OPS))

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
        self.matcher = Matcher(self.faults, self.arm_at)
        self.report = report
        self._fired: list[dict] = []
        self._lock = threading.Lock()

    @property
    def has_power_loss(self) -> bool:
        return any(f.effect == POWER_LOSS for f in self.faults)

    def firings(self) -> list[dict]:
        return list(self._fired)

    def fire(self, i: int, caller: Caller | None, action: str, **detail) -> dict:
        f = self.faults[i]
        who = {} if caller is None else {"rank": caller.rank, "thread": caller.thread, "pid": caller.tgid}
        rec = firing(f, action, via=VIA, **who, **detail)
        with self._lock:
            self._fired.append(rec)
        if caller is not None:
            self.matcher.fired(i, caller.rank)
        if self.report is not None:
            self.report.append(rec)
        return rec

    def reached(self, rank: int, index: int) -> None:
        """Rank `rank` begins its operation `index`: the records armed there count its operations from now."""
        self.matcher.reached(rank, index)

    def before(self, caller: Caller, op: str | None, paths: tuple[str, ...], *, length: int = 0, **where) -> Decision:
        """Count this request against every fault; say what to do before (and, for a write, while) doing
        it, each firing recorded. `op` is the seam operation (base.seam_op); `where` goes into the firings."""
        d = self.matcher.operation(op, paths, rank=caller.rank, thread=caller.thread, length=length)
        if not d.slow and d.error is None and d.crash is None and not d.partial:
            return d  # nothing fires (most requests)
        where = {"op": op, "path": paths[0], **({"dst": paths[1]} if len(paths) > 1 else {}), **where}
        for slow in d.slow:
            if slow.first:
                self.fire(slow.index, caller, "slow", delay=slow.delay, **where)
        if d.error is not None:
            self.fire(d.error.index, caller, f"raise {d.error.errno}", errno=d.error.errno, **where)
        elif d.crash is not None:
            self.fire(d.crash, caller, crash_action(self.faults[d.crash]), when="before", **where)
        for p in d.partial:
            if p.torn:
                self.fire(p.index, caller, "torn", length=length, kept=p.kept, fill=p.fill, **where)
            else:
                self.fire(p.index, caller, "short", length=length, kept=p.kept, **where)
        return d

    def after(self, caller: Caller, op: str | None, paths: tuple[str, ...], d: Decision, **where) -> Fault | None:
        """A crash due right after the operation (fired), if any."""
        i = self.matcher.after(d)
        if i is None:
            return None
        f = self.faults[i]
        dst = {"dst": paths[1]} if len(paths) > 1 else {}
        self.fire(i, caller, crash_action(f), when="after", op=op, path=paths[0], **dst, **where)
        return f

    def arm(self, caller: Caller, path: str) -> list[int]:
        """An open for writing: the at_byte crashes whose nth matching file this is (indices)."""
        return self.matcher.open_write(path, rank=caller.rank, thread=caller.thread)

    def at_open(self, armed: list[int]) -> int | None:
        """The crash among `armed` that strikes at the open itself (at byte 0), if any."""
        return self.matcher.at_open(armed)

    def cut(self, armed: list[int], offset: int, length: int) -> tuple[int, int] | None:
        """(fault index, bytes of this write to keep) when a write from `offset` reaches an armed at_byte."""
        return self.matcher.cut(armed, offset, length)

    def close(self, ranks: Iterable[int]) -> None:
        """Unmount: a lost_unsynced_writes record with no crash point fires now, after the last operation,
        once per rank of the map it targets that armed it (the runner then builds the crash states)."""
        for i, r in self.matcher.at_close(ranks):
            self.fire(i, None if r is None else Caller(0, 0, r), "power_loss", when="after the last operation")


def carries_out(f: Fault) -> bool:
    """Whether the file system carries out a record (FuseInjector.CARRIES): an in-process effect, not at
    a phase (phases are announced by checkpoint code in process; a file system cannot hear them)."""
    return FuseInjector.CARRIES.carries(f)


__all__ = ["FuseInjector", "VIA", "carries_out"]
