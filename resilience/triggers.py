"""When an in-process fault fires: the one set of rules every carrier follows.

A carrier meets a rank's I/O and carries faults out on it: the storage seam inside the rank
(faults/inject.py), the FUSE file system under every writer (fusefs/), and whatever comes next. Each
asks a `Matcher` what to do with one operation and performs the answer; the rules are here, once:

- which operations a record counts (`counts`): an io_error its target.op (any op when none), a
  slow_write its target.op (writes when none), short and torn writes the writes, a crash its target.op
  (a crash at a byte counts opens for writing, a crash at a phase the phases);
- which it matches (`applies`): a rank it targets, a path its glob matches (`matches_path`), its
  thread; counted per (record, rank), so `nth: 3` aimed at two ranks fires on the third of each;
- from when (`arm_at`): a record armed at a rank operation counts nothing of that rank before it;
- once or always: a record that fired (the carrier says so: `fired`) counts no more, except a slow
  one, which slows every matching operation from its nth on, `times` of them (None: all);
- a crash at a byte is armed by its nth matching open for writing and cuts the write that reaches
  the byte (`open_write`, `cut`); one at byte 0 strikes at the open (`at_open`);
- a power loss with no crash point strikes when the carrier closes, after the last operation
  (`at_close`);
- the order within one operation (`operation`, then `after`): slow, fail with an errno (or, on an HTTP
  request, answer with an error), crash before, cut the request's body (reset) or write short or torn (a
  crash at a byte cuts it), crash after, lose the answer. A failure or a crash before ends the decision:
  the operation does not happen. The HTTP effects count as io_error does: their target.op, any when none.

The Matcher does no I/O, no sleeping, no killing and reads no clock: it counts and returns a `Decision`,
and the carrier sleeps, fails, writes, records the firing and kills.

Why a module of its own at the bottom of the layers, and not one inside faults/: it sits below every
carrier (faults, fusefs, and a third one in a package of its own), so none owns the rules and none
reaches into another for them. It reads the records through the small protocols below (`Record`: an
`effect`, a `target` and a `trigger`; the effect's parameters), which the classes of faults/kinds.py
satisfy as they are; so it imports nothing of the package and takes one name in an existing layer of
the import contract, with no contract of its own. A carrier states what it carries (`Carries`): the
effects it can perform and whether it hears phases."""

from __future__ import annotations

import fnmatch
import os
import random
import threading
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, cast

# What a record does when it fires, in the carriers' vocabulary (a kind's `effect`)
FAIL = "fail"  # the operation fails with an errno (io_error)
SLOW = "slow"  # the operation waits first (slow_write)
SHORT = "short"  # a write stores a prefix and says so (short_write)
TORN = "torn"  # a write stores a prefix, fills the rest, says it wrote all (torn_write)
CRASH = "crash"  # the rank is killed (rank_crash)
POWER_LOSS = "power_loss"  # the machine stops; unsynced writes may be lost (lost_unsynced_writes)
ANSWER = "answer"  # an HTTP request is answered with an error and never reaches the server (http_error)
RESET = "reset"  # an HTTP connection is reset partway through a body (connection_reset)
LOSE = "lose"  # an HTTP request is done by the server, its answer lost on the way back (response_lost)
FILE_EFFECTS = (FAIL, SLOW, SHORT, TORN, CRASH, POWER_LOSS)  # on a file system's operations
HTTP_EFFECTS = (ANSWER, RESET, LOSE)  # on an object store's requests
EFFECTS = FILE_EFFECTS + HTTP_EFFECTS
CRASHES = (CRASH, POWER_LOSS)


def matches_path(pattern: str | None, path: str, rel: str | None = None) -> bool:
    """fnmatch `pattern` against the full path, its relative form, or (no '/' in it) the file name.
    `*` also matches '/', so '*.pt' is every .pt file at any depth."""
    if pattern is None:
        return True
    if fnmatch.fnmatchcase(path, pattern) or (rel is not None and fnmatch.fnmatchcase(rel, pattern)):
        return True
    return "/" not in pattern and fnmatch.fnmatchcase(os.path.basename(path), pattern)


# ---- the records, as the rules read them ----------------------------------------------------------
class Aim(Protocol):
    """Where a record strikes (faults.base.Target)."""

    @property
    def path(self) -> str | None: ...
    @property
    def op(self) -> str | None: ...
    @property
    def thread(self) -> str | None: ...
    def has_rank(self, rank: int) -> bool: ...


class When(Protocol):
    """When a record strikes (faults.base.Trigger)."""

    @property
    def nth(self) -> int: ...
    @property
    def when(self) -> str: ...
    @property
    def at_byte(self) -> int | None: ...
    @property
    def phase(self) -> str | None: ...


class Record(Protocol):
    """A fault record a carrier can meet: its effect (one of EFFECTS; None: not carried on I/O), where
    and when."""

    @property
    def kind(self) -> str: ...
    @property
    def effect(self) -> str | None: ...
    @property
    def target(self) -> Aim: ...
    @property
    def trigger(self) -> When: ...


class Fails(Record, Protocol):
    @property
    def errno(self) -> str: ...
    @property
    def code(self) -> int: ...


class Slows(Record, Protocol):
    @property
    def delay(self) -> float: ...
    @property
    def times(self) -> int | None: ...


class Keeps(Record, Protocol):
    @property
    def keep(self) -> int | None: ...


class Tears(Keeps, Protocol):
    @property
    def fill(self) -> str: ...
    @property
    def seed(self) -> int: ...


class Answers(Record, Protocol):
    @property
    def status(self) -> int: ...
    @property
    def code(self) -> str: ...


# ---- the rules of one record -----------------------------------------------------------------------
def counts(f: Record, op: str) -> bool:
    """Does this record count operations of kind `op` (faults.base.OPS)?"""
    effect, t, g = f.effect, f.target, f.trigger
    if effect == FAIL or effect in HTTP_EFFECTS:
        return t.op in (None, op)
    if effect == SLOW:
        return (t.op or "write") == op
    if effect in (SHORT, TORN):
        return op == "write"
    if effect in CRASHES:
        return g.phase is None and g.at_byte is None and t.op == op
    return False


def applies(f: Record, rank: int, thread: str, path: str) -> bool:
    """Does this record reach an operation of `rank`'s `thread` on `path`?"""
    t = f.target
    return t.has_rank(rank) and matches_path(t.path, path) and t.thread in (None, thread)


def at_close(f: Record) -> bool:
    """A power loss with no crash point: it strikes after the last operation, as its carrier closes."""
    g = f.trigger
    return f.effect == POWER_LOSS and f.target.op is None and g.at_byte is None and g.phase is None


def crash_action(f: Record) -> str:
    """What a crash's firing says it did (the seam's words, every carrier's)."""
    return "power_loss" if f.effect == POWER_LOSS else "sigkill"


def kept(f: Keeps, length: int) -> int:
    """How many bytes of a `length`-byte write a short or torn record keeps (None: half)."""
    return min(length, length // 2 if f.keep is None else f.keep)


# ---- what to do with one operation -----------------------------------------------------------------
@dataclass(frozen=True)
class Slow:
    """Wait `delay` seconds first; `first`: the first time this record slows this rank (its firing)."""

    index: int
    delay: float
    first: bool


@dataclass(frozen=True)
class Fail:
    """Fail the operation with this errno (name and number)."""

    index: int
    errno: str
    code: int


@dataclass(frozen=True)
class Partial:
    """Store only the first `kept` bytes of the write: short (say so), or torn (fill the rest, say all)."""

    index: int
    kept: int
    torn: bool = False
    fill: str = "zeros"  # torn: zeros or seeded garbage
    seed: int = 0

    def fill_bytes(self, length: int) -> bytes:
        """What lands after the kept bytes of a torn write."""
        return bytes(length) if self.fill == "zeros" else random.Random(self.seed).randbytes(length)


@dataclass(frozen=True)
class Answer:
    """Answer the request with this HTTP status and S3 error code, instead of the server."""

    index: int
    status: int
    code: str


@dataclass
class Decision:
    """What the records decided for one operation, in the order a carrier does it: `slow` (each
    record's wait), then `error`, or else `crash` (before the operation), or else the operation with
    `partial` writes applied; on an HTTP request `answer` (instead of the server), `reset` (the body cut
    after `reset.kept` bytes) and `lose` (the answer dropped once the server gave it). `hits` (record
    index, its count of this rank's operations) is what Matcher.after reads once the operation is done."""

    rank: int | None = None
    hits: list[tuple[int, int]] = field(default_factory=list)
    slow: list[Slow] = field(default_factory=list)
    error: Fail | None = None
    crash: int | None = None  # index of the crash record due before the operation
    partial: list[Partial] = field(default_factory=list)
    answer: Answer | None = None
    reset: Partial | None = None
    lose: int | None = None  # index of the record that loses the answer

    @property
    def delay(self) -> float:
        return sum(s.delay for s in self.slow)

    def kept(self, length: int) -> int:
        """Bytes of a `length`-byte write the short records leave (a torn one is told apart: `tear`)."""
        return min([length] + [p.kept for p in self.partial if not p.torn])

    @property
    def tear(self) -> Partial | None:
        """The torn record that shapes this write (the last one due)."""
        torn = [p for p in self.partial if p.torn]
        return torn[-1] if torn else None


class Matcher:
    """The rules above over one carrier's records (`records`, indexed as given), with `arm_at[i]` the
    rank operation from which record i counts (None: from the start; told by `reached`). Counts are kept
    per (record, rank); safe to call from several threads."""

    def __init__(self, records: Sequence[Record], arm_at: Sequence[int | None] | None = None):
        self.records = list(records)
        self.arm_at = list(arm_at) if arm_at is not None else [None] * len(self.records)
        if len(self.arm_at) != len(self.records):
            raise ValueError(f"{len(self.arm_at)} arming points for {len(self.records)} fault records")
        self._reached: dict[int, int] = {}  # rank -> the last rank operation index it announced
        self._count: dict[tuple[int, int], int] = {}
        self._slowed: dict[tuple[int, int], int] = {}
        self._done: set[tuple[int, int]] = set()
        self._lock = threading.Lock()

    # ---- what the carrier tells ------------------------------------------------------------------
    def reached(self, rank: int, index: int) -> None:
        """Rank `rank` begins its operation `index`: the records armed there count its operations from now."""
        with self._lock:
            self._reached[rank] = max(index, self._reached.get(rank, -1))

    def fired(self, index: int, rank: int | None) -> None:
        """Record `index` fired on `rank`: it counts no more there (a slow one goes on)."""
        if rank is not None:
            with self._lock:
                self._done.add((index, rank))

    # ---- counting --------------------------------------------------------------------------------
    def armed(self, index: int, rank: int) -> bool:
        at = self.arm_at[index]
        return at is None or self._reached.get(rank, -1) >= at

    def _live(self, index: int, rank: int) -> bool:
        """Armed, and not fired yet (a slow record stays live once fired)."""
        if not self.armed(index, rank):
            return False
        return (index, rank) not in self._done or self.records[index].effect == SLOW

    def _bump(self, index: int, rank: int) -> int:
        key = (index, rank)
        self._count[key] = self._count.get(key, 0) + 1
        return self._count[key]

    def _hits(self, op: str, paths: tuple[str, ...], rank: int, thread: str) -> list[tuple[int, int]]:
        hits = []
        with self._lock:
            for i, f in enumerate(self.records):
                if not counts(f, op) or not self._live(i, rank):
                    continue
                if any(applies(f, rank, thread, p) for p in paths):
                    hits.append((i, self._bump(i, rank)))
        return hits

    def _slows(self, hits: list[tuple[int, int]], rank: int) -> list[Slow]:
        out = []
        with self._lock:
            for i, n in hits:
                f = self.records[i]
                if f.effect != SLOW:
                    continue
                s = cast(Slows, f)
                slowed = self._slowed.get((i, rank), 0)
                if n < s.trigger.nth or (s.times is not None and slowed >= s.times):
                    continue
                self._slowed[(i, rank)] = slowed + 1
                out.append(Slow(i, s.delay, first=not slowed))
        return out

    # ---- decisions -------------------------------------------------------------------------------
    def operation(
        self, op: str | None, paths: tuple[str, ...], *, rank: int | None, thread: str, length: int = 0
    ) -> Decision:
        """Count one operation `op` (faults.base.OPS; None: one the seam has no word for, never counted) of
        `rank`'s `thread` on `paths` (a rename's source and destination) against every record, and say
        what to do before it and, for a write of `length` bytes, while doing it. No rank: a caller
        outside every rank, never faulted."""
        if rank is None or op is None:
            return Decision(rank)
        hits = self._hits(op, paths, rank, thread)
        d = Decision(rank, hits, self._slows(hits, rank))
        due = [(i, self.records[i]) for i, n in hits if n == self.records[i].trigger.nth]
        for i, f in due:
            if f.effect == FAIL:
                e = cast(Fails, f)
                d.error = Fail(i, e.errno, e.code)
                return d
            if f.effect == ANSWER:
                a = cast(Answers, f)
                d.answer = Answer(i, a.status, a.code)
                return d
        for i, f in due:
            if f.effect in CRASHES and f.trigger.when == "before":
                d.crash = i
                return d
        for i, f in due:
            if f.effect == SHORT:
                d.partial.append(Partial(i, kept(cast(Keeps, f), length)))
            elif f.effect == TORN:
                t = cast(Tears, f)
                d.partial.append(Partial(i, kept(t, length), torn=True, fill=t.fill, seed=t.seed))
            elif f.effect == RESET and d.reset is None:
                d.reset = Partial(i, kept(cast(Keeps, f), length))
            elif f.effect == LOSE and d.lose is None:
                d.lose = i
        return d

    def after(self, d: Decision) -> int | None:
        """The crash record due right after the operation `d` decided, once it was done (index)."""
        for i, n in d.hits:
            f = self.records[i]
            if f.effect in CRASHES and f.trigger.when == "after" and n == f.trigger.nth:
                return i
        return None

    def open_write(self, path: str, *, rank: int | None, thread: str) -> list[int]:
        """An open for writing of `path`: the crashes at a byte whose nth matching file this is (indices)."""
        armed: list[int] = []
        if rank is None:
            return armed
        with self._lock:
            for i, f in enumerate(self.records):
                if f.effect not in CRASHES or f.trigger.at_byte is None or not self._live(i, rank):
                    continue
                if applies(f, rank, thread, path) and self._bump(i, rank) == f.trigger.nth:
                    armed.append(i)
        return armed

    def at_open(self, armed: Iterable[int]) -> int | None:
        """The crash, among those an open armed, that strikes at once (at byte 0: the file exists, empty)."""
        return next((i for i in armed if self.records[i].trigger.at_byte == 0), None)

    def cut(self, armed: Iterable[int], offset: int, length: int) -> tuple[int, int] | None:
        """(record index, bytes of this write to keep) when a write from `offset` reaches an armed byte."""
        for i in armed:
            at = self.records[i].trigger.at_byte
            if at is not None and offset < at <= offset + length:
                return i, at - offset
        return None

    def phase(self, phase: str, *, rank: int, thread: str) -> int | None:
        """`rank`'s `thread` begins the named phase: the crash due as it does (index), if any."""
        due = None
        with self._lock:
            for i, f in enumerate(self.records):
                t = f.target
                if f.effect not in CRASHES or f.trigger.phase != phase or not self._live(i, rank):
                    continue
                if not t.has_rank(rank) or t.thread not in (None, thread):
                    continue
                if self._bump(i, rank) == f.trigger.nth and due is None:
                    due = i
        return due

    def at_close(self, ranks: Iterable[int]) -> list[tuple[int, int | None]]:
        """The carrier closes: each power loss with no crash point that never fired strikes now, once per
        rank of `ranks` it targets and was armed on ((index, rank); rank None when it targets none)."""
        ranks = sorted(ranks)
        out: list[tuple[int, int | None]] = []
        for i, f in enumerate(self.records):
            if not at_close(f) or any(i == j for j, _ in self._done):
                continue
            targeted: list[int | None] = [r for r in ranks if f.target.has_rank(r)] or [None]
            out += [(i, r) for r in targeted if r is None or self.armed(i, r)]
        return out


@dataclass(frozen=True)
class Carries:
    """What a carrier carries out: the effects it can perform, whether it hears a save's phases
    (announced by checkpoint code in process; a file system cannot hear them), and the operations it
    meets (`ops`, None: any), so a record aimed at another's operation (a crash at an HTTP request) is
    not taken by a file system. An effect of `aimed` is carried only by a record naming one of `ops`:
    a slow_write or rank_crash with no target.op means a file's write or byte, which a proxy never meets."""

    name: str
    effects: frozenset[str]
    phases: bool
    ops: frozenset[str] | None = None
    aimed: frozenset[str] = frozenset()

    def carries(self, f: Record) -> bool:
        op = f.target.op
        if f.effect not in self.effects or not (self.phases or f.trigger.phase is None):
            return False
        if op is None:
            return f.effect not in self.aimed
        return self.ops is None or op in self.ops

    def kinds(self, classes: Iterable[Any]) -> list[str]:
        """The kinds among record classes (faults.KINDS.values()) it carries (at a phase too, when it
        hears them; at one of its operations, when it needs one)."""
        return [c.kind for c in classes if c.effect in self.effects]

    def describe(self, classes: Iterable[Any]) -> str:
        """ "fuse carries io_error, ... (none at a phase)": for an error that names what would have fired."""
        classes = list(classes)
        aimed = [c.kind for c in classes if c.effect in self.effects & self.aimed]
        return (
            f"{self.name} carries {', '.join(self.kinds(classes))}"
            + ("" if self.phases else " (none at a phase)")
            + (f" ({', '.join(aimed)} only at a target.op it meets)" if aimed else "")
        )


__all__ = [
    "ANSWER",
    "Answer",
    "CRASH",
    "CRASHES",
    "Carries",
    "Decision",
    "EFFECTS",
    "FAIL",
    "FILE_EFFECTS",
    "Fail",
    "HTTP_EFFECTS",
    "LOSE",
    "Matcher",
    "POWER_LOSS",
    "Partial",
    "RESET",
    "Record",
    "SHORT",
    "SLOW",
    "Slow",
    "TORN",
    "applies",
    "at_close",
    "counts",
    "crash_action",
    "kept",
    "matches_path",
]
