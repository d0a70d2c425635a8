"""Which rank made a request: the kernel gives the caller's thread id; the rank is the one whose process
tree holds it, so a writer a rank forked, or a `dd` it ran, counts as that rank's.

The runner gives a map rank -> root pid. A caller is walked up through its parents (/proc/<pid>/status)
until a root is met; a process that lost its parent (reparented when the rank died first) still counts
by its process group, since every rank leads its own group (resilience.launch.local). Answers are cached
per thread id together with its parent, group and process, so a pid the kernel reuses elsewhere is asked
again. Those three are checked at each request without reading /proc where the kernel has thread pidfds
(Linux 6.9): a cached caller's thread and its parent process are held as pidfds, which the kernel marks
when they exit, and its group is one getpgid away (`_Watch`); elsewhere status is read each time.

Never /proc/<pid>/stat (resilience.launch.proctable): the kernel holds it shut while the process is in
the middle of an exec, and an exec closes the close-on-exec descriptors, files of this mount among them,
whose flush waits on this file system: a rank that runs `os.system` with a checkpoint file open would hang
both for good.

Killing a rank kills its process group when the rank leads one of its own, and its process tree; a rank
that shares the group of the runner or of the file system (a test's plain subprocess) is killed as a
process tree only, never by group: that group holds the runner itself.

A map may also read ranks from the callers' environment (`rank_env`, e.g. "RANK": what torchrun sets for its
workers; "RANK,LOCAL_RANK": the first of them set, for launchers that set only LOCAL_RANK), for a job the
runner did not start rank by rank. A caller outside every root is then the rank of its nearest ancestor that
has one (a rank's threads, forked writers and `dd`s inherit it, and a child caught in the middle of its exec
is never read), else the value its own /proc/<pid>/environ holds; a process with a rank of its own whose
parent has none (a torchrun worker) becomes that rank's root, the one a crash kills. /proc/<pid>/environ is
held shut while that process execs, like stat: it is read in a thread of its own, and a caller not read
within ENV_WAIT counts as no rank's for that request."""

from __future__ import annotations

import os
import select
import signal
import threading
from collections.abc import Iterable, Mapping

from ..launch.proctable import descendants, group_members, status as _stat
from .words import Caller

ENV_WAIT = 1.0  # seconds to wait for a caller's /proc/<pid>/environ (held shut during its exec)
PIDFD_THREAD = os.O_EXCL  # pidfd_open(2): a descriptor of one thread, not of its whole process (Linux 6.9)
WATCHED = 64  # cached callers (two pidfds each) at most; past it the oldest answer is let go


class _Watch:
    """Says whether a cached caller's (parent, group, process) still hold without reading /proc: its thread
    still lives (so its id was not reused, and its process is the same), its parent process still lives (a
    process is reparented only when its parent exits) and its group is the same. None of these changing is
    exactly what equal status fields meant. Used under the RankMap's lock, which also closes it."""

    def __init__(self, tid: int, st: tuple[int, int, int]):
        self.tid, self.pgid = tid, st[1]
        self.fds: list[int] = []
        self._poll = select.poll()
        try:
            self.fds.append(os.pidfd_open(tid, PIDFD_THREAD))
            self.fds.append(os.pidfd_open(st[0]))
        except (OSError, AttributeError):  # no thread pidfds here, no parent to watch, or gone already
            self.close()
            raise OSError("not watchable") from None
        for fd in self.fds:
            self._poll.register(fd, select.POLLIN)

    @classmethod
    def of(cls, tid: int, st: tuple[int, int, int]) -> _Watch | None:
        """A watch on what `st` (read before) says, or None: it cannot be made, or `st` changed meanwhile
        (the descriptors are then of another thread or parent than `st` described)."""
        try:
            watch = cls(tid, st)
        except OSError:
            return None
        if _stat(tid) != st or not watch.holds():
            watch.close()
            return None
        return watch

    def holds(self) -> bool:
        if self._poll.poll(0):  # one of them exited
            return False
        try:
            return os.getpgid(self.tid) == self.pgid
        except OSError:
            return False

    def close(self) -> None:
        for fd in self.fds:
            os.close(fd)
        self.fds = []


def environ_value(pid: int, name: str) -> str | None:
    """The value of `name` in a process's environment as it started; None when unset or unreadable. `name`
    may list several, comma-separated ("RANK,LOCAL_RANK"): the first one set."""
    try:
        with open(f"/proc/{pid}/environ", "rb") as f:
            raw = f.read()
    except OSError:
        return None
    entries = raw.split(b"\0")
    for one in name.split(","):
        key = one.strip().encode() + b"="
        for entry in entries:
            if entry.startswith(key):
                return entry[len(key) :].decode(errors="replace")
    return None


def _env_rank(pid: int, name: str, wait: float = ENV_WAIT) -> tuple[bool, int | None]:
    """(read, rank) of a process from its environment: read is False when it did not answer within `wait`
    (in the middle of an exec); rank None when it has none, or one that is not a whole number >= 0."""
    out: list[str | None] = []
    reader = threading.Thread(target=lambda: out.append(environ_value(pid, name)), name="fusefs-environ", daemon=True)
    reader.start()
    reader.join(wait)
    if not out:
        return False, None
    value = (out[0] or "").strip()
    return True, int(value) if value.isdigit() else None


def tree(root: int) -> list[int]:
    """`root` and every process below it."""
    return [root, *descendants(root)]


class RankMap:
    """pid -> rank for one mount. `protected` are process groups a kill must never reach as a whole (the
    runner's, the file system's); `spared` processes a kill never reaches at all (the runner, the file
    system: a rank map that names the runner itself as a rank must not kill it)."""

    def __init__(
        self,
        roots: Mapping[int, int] | None = None,
        *,
        protected: Iterable[int] = (),
        spared: Iterable[int] = (),
        rank_env: str | None = None,
    ):
        self._lock = threading.Lock()
        self._protected = frozenset(protected)
        self._spared = frozenset(spared)
        # tid -> (its _stat, answer, a watch on that _stat or None)
        self._cache: dict[int, tuple[tuple[int, int, int], Caller, _Watch | None]] = {}
        self.rank_env = rank_env
        self._by_env: dict[int, tuple[tuple[int, int, int], int | None]] = {}  # process -> (its _stat, rank)
        self._asked = threading.local()
        self.version = 0
        self.update(roots or {})

    def update(self, roots: Mapping[int, int]) -> int:
        """Replace the map (rank -> root pid); forget every cached answer. Returns the new version."""
        pids = {int(r): int(p) for r, p in roots.items()}
        with self._lock:
            self.roots = pids
            self._by_pid = {p: r for r, p in pids.items()}
            self._groups = {}
            for r, p in pids.items():  # a root that leads its own group: its pgid names the rank
                st = _stat(p)
                if st is not None and st[1] == p:
                    self._groups[p] = r
            self._forget()
            self._by_env.clear()
            self.version += 1
            return self.version

    def add(self, rank: int, pid: int) -> int:
        """Rank `rank`'s root is `pid` (a rank announcing itself), the others kept. Returns the new version."""
        return self.update({**self.roots, int(rank): int(pid)})

    def caller(self, pid: int) -> Caller:
        """Who `pid` (a thread id from fuse_get_context) is; rank None outside every rank or once gone."""
        with self._lock:
            hit = self._cache.get(pid)
            if hit is not None and hit[2] is not None and hit[2].holds():
                return hit[1]
        st = _stat(pid) if pid > 0 else None
        if st is None:
            return Caller(pid, pid, None)
        with self._lock:
            hit = self._cache.get(pid)
        if hit is not None and hit[0] == st:
            if hit[2] is not None:  # it no longer held, yet status reads the same: watch what is there now
                self._remember_caller(pid, st, hit[1])
            return hit[1]
        tgid = st[2]
        self._asked.unread = False
        answer = Caller(pid, tgid, self._rank_of(tgid, st), "main" if tgid == pid else "writer")
        if not self._asked.unread:  # an environment not read yet is asked again at the next request
            self._remember_caller(pid, st, answer)
        return answer

    def _remember_caller(self, pid: int, st: tuple[int, int, int], answer: Caller) -> None:
        watch = _Watch.of(pid, st)
        with self._lock:
            old = self._cache.pop(pid, None)
            if old is not None and old[2] is not None:
                old[2].close()
            self._cache[pid] = (st, answer, watch)
            while len(self._cache) > WATCHED:  # the oldest first: dicts keep insertion order
                _, _, gone = self._cache.pop(next(iter(self._cache)))
                if gone is not None:
                    gone.close()

    def _forget(self) -> None:
        """Drop every cached answer and its watch (under the lock)."""
        for _, _, watch in self._cache.values():
            if watch is not None:
                watch.close()
        self._cache.clear()

    def _rank_of(self, tgid: int, st: tuple[int, int, int]) -> int | None:
        pid, seen = tgid, 0
        while pid > 1 and seen < 512:  # bounded: /proc can change under the walk
            if pid in self._by_pid:
                return self._by_pid[pid]
            parent = _stat(pid)
            if parent is None:
                break
            pid, seen = parent[0], seen + 1
        found = self._groups.get(st[1])
        if found is None and self.rank_env is not None:
            return self._rank_from_env(tgid, st)
        return found

    def _rank_from_env(self, tgid: int, st: tuple[int, int, int]) -> int | None:
        """The rank of the nearest ancestor that has one, else the process's own environment's; a process
        with its own rank under a parent without one becomes that rank's root."""
        chain: list[tuple[int, tuple[int, int, int]]] = []
        pid, st_of = tgid, st
        while pid > 1 and len(chain) < 512:
            with self._lock:
                hit = self._by_env.get(pid)
            if hit is not None and hit[0] == st_of:
                if hit[1] is not None and chain:  # inherited by every process between it and the caller
                    self._remember(chain, hit[1])
                    return hit[1]
                if not chain:
                    return hit[1]
                break
            chain.append((pid, st_of))
            parent = _stat(st_of[0]) if st_of[0] > 1 else None
            if parent is None:
                break
            pid, st_of = st_of[0], parent
        read, rank = _env_rank(tgid, self.rank_env or "")
        if not read:
            self._asked.unread = True  # per request thread: libfuse serves several at once
            return None
        # the rank's root is its topmost process with that rank (a worker whose forked writer wrote first is
        # still the worker): up the ancestors while their environment holds the same rank
        root, root_st = tgid, st
        for pid_up, st_up in chain[1:]:
            ok, up = _env_rank(pid_up, self.rank_env or "")
            if not ok or up != rank:
                break
            root, root_st = pid_up, st_up
        with self._lock:
            self._by_env[tgid] = (st, rank)
            if rank is not None and self.roots.get(rank) != root:
                old = self.roots.get(rank)
                if old is not None:  # a rank started again (torchrun's own restart): the new process is its root
                    self._by_pid.pop(old, None)
                    self._groups.pop(old, None)
                self.roots = {**self.roots, rank: root}
                self._by_pid[root] = rank
                if root_st[1] == root:
                    self._groups[root] = rank
        return rank

    def _remember(self, chain: list[tuple[int, tuple[int, int, int]]], rank: int) -> None:
        with self._lock:
            for pid, st in chain:
                self._by_env[pid] = (st, rank)

    def kill(self, rank: int) -> list[int]:
        """SIGKILL a rank: its whole process group when it leads one that is not protected, and its process
        tree in any case (a child that left the group with setsid still dies with its rank). Returns the
        pids signalled (the file system drops their requests still in flight)."""
        root = self.roots.get(rank)
        if root is None or root in self._spared:
            return []
        st = _stat(root)
        pgid = root if root in self._groups or (st is not None and st[1] == root) else None
        pids: set[int] = set()
        if pgid is not None and pgid not in self._protected:
            pids.update(group_members(pgid))
            try:
                os.killpg(pgid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        tree_pids = [p for p in tree(root) if p not in self._spared and p not in pids]
        for pid in tree_pids:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        return sorted(pids.union(tree_pids))


__all__ = ["RankMap", "group_members", "tree"]
