"""Which rank made a request: the kernel gives the caller's thread id; the rank is the one whose process
tree holds it, so a writer a rank forked, or a `dd` it ran, counts as that rank's.

The runner gives a map rank -> root pid. A caller is walked up through its parents (/proc/<pid>/status)
until a root is met; a process that lost its parent (reparented when the rank died first) still counts
by its process group, since every rank leads its own group (resilience.launch.local). Answers are cached
per thread id together with its parent and process, so a pid the kernel reuses elsewhere is asked again.

Never /proc/<pid>/stat (resilience.launch.proctable): the kernel holds it shut while the process is in
the middle of an exec, and an exec closes the close-on-exec descriptors, files of this mount among them,
whose flush waits on this file system: a rank that runs `os.system` with a checkpoint file open would hang
both for good.

Killing a rank kills its process group when the rank leads one of its own, and its process tree; a rank
that shares the group of the runner or of the file system (a test's plain subprocess) is killed as a
process tree only, never by group: that group holds the runner itself."""

from __future__ import annotations

import os
import signal
import threading
from collections.abc import Iterable, Mapping

from ..launch.proctable import descendants, group_members, status as _stat
from .words import Caller


def tree(root: int) -> list[int]:
    """`root` and every process below it."""
    return [root, *descendants(root)]


class RankMap:
    """pid -> rank for one mount. `protected` are process groups a kill must never reach as a whole (the
    runner's, the file system's); `spared` processes a kill never reaches at all (the runner, the file
    system: a rank map that names the runner itself as a rank must not kill it)."""

    def __init__(
        self, roots: Mapping[int, int] | None = None, *, protected: Iterable[int] = (), spared: Iterable[int] = ()
    ):
        self._lock = threading.Lock()
        self._protected = frozenset(protected)
        self._spared = frozenset(spared)
        self._cache: dict[int, tuple[tuple[int, int, int], Caller]] = {}  # tid -> (its _stat, answer)
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
            self._cache.clear()
            self.version += 1
            return self.version

    def add(self, rank: int, pid: int) -> int:
        """Rank `rank`'s root is `pid` (a rank announcing itself), the others kept. Returns the new version."""
        return self.update({**self.roots, int(rank): int(pid)})

    def caller(self, pid: int) -> Caller:
        """Who `pid` (a thread id from fuse_get_context) is; rank None outside every rank or once gone."""
        st = _stat(pid) if pid > 0 else None
        if st is None:
            return Caller(pid, pid, None)
        with self._lock:
            hit = self._cache.get(pid)
            if hit is not None and hit[0] == st:
                return hit[1]
        tgid = st[2]
        answer = Caller(pid, tgid, self._rank_of(tgid, st), "main" if tgid == pid else "writer")
        with self._lock:
            self._cache[pid] = (st, answer)
        return answer

    def _rank_of(self, tgid: int, st: tuple[int, int, int]) -> int | None:
        pid, seen = tgid, 0
        while pid > 1 and seen < 512:  # bounded: /proc can change under the walk
            if pid in self._by_pid:
                return self._by_pid[pid]
            parent = _stat(pid)
            if parent is None:
                break
            pid, seen = parent[0], seen + 1
        return self._groups.get(st[1])

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
