"""The external nemesis: kill or stop rank processes from the parent, with no help from the code under test.

A Nemesis runs in the parent while a launch.Job runs (one polling thread, started after the ranks are
forked and joined before anything else forks). Each RankKill / RankHang fault fires once: `after` seconds,
or once a matching file under the watched folder reaches `size` bytes, seen either as the file's size or
as the write position of a rank's open descriptor (/proc/<pid>/fdinfo, through psutil). After a single
rank dies the Job tears the others down, as torchrun does. A WriterKill fires once a background writer
of a target rank (faults.writers) holds a matching file, and kills the writer only: the rank lives on."""

from __future__ import annotations

import os
import signal
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import replace

import psutil

from ..errors import ConfigError
from .base import Fault, matches_path, typed
from .firings import FaultReport, firing
from .kinds import RankHang, RankKill, WriterKill
from .writers import Holding, below, describe, holdings, is_helper, writer_tree


def signal_ranks(pids: Iterable[int], sig: int, *, tree: bool = False) -> list[int]:
    """Send `sig` to each live pid (and, with tree, to everything it started); the pids reached."""
    reached = []
    for pid in pids:
        try:
            proc = psutil.Process(pid)
            targets = ([proc] + proc.children(recursive=True)) if tree else [proc]
            for p in targets:
                try:
                    p.send_signal(sig)
                except psutil.NoSuchProcess:
                    pass
            reached.append(pid)
        except psutil.NoSuchProcess:
            continue
    return reached


def kill_ranks(job, ranks: Iterable[int] | None = None, sig: int = signal.SIGKILL) -> list[int]:
    """SIGKILL (or `sig`) some ranks of a started Job; None: all of them (a preemption, children too)."""
    ranks = list(range(job.world)) if ranks is None else list(ranks)
    return signal_ranks([job.pids[r] for r in ranks], sig, tree=len(ranks) == job.world)


def open_positions(pid: int) -> dict[str, int]:
    """path -> current offset of every regular file `pid` has open (from /proc/<pid>/fdinfo)."""
    try:
        return {f.path: f.position for f in psutil.Process(pid).open_files()}
    except (psutil.NoSuchProcess, psutil.AccessDenied):
        return {}


def file_sizes(folder: str, pattern: str | None) -> dict[str, int]:
    """path -> size of every file under `folder` matching `pattern` (relative or base name)."""
    out = {}
    for dirpath, _, files in os.walk(folder):
        for name in files:
            path = os.path.join(dirpath, name)
            if matches_path(pattern, path, os.path.relpath(path, folder)):
                try:
                    out[path] = os.stat(path).st_size
                except FileNotFoundError:
                    continue
    return out


class Nemesis:
    """Runs the nemesis faults of a scenario against a started Job; use as a context manager around
    job.wait(). `firings()` says what it did; a fault whose trigger never came is left unfired."""

    def __init__(
        self,
        job,
        faults,
        *,
        folder: str | os.PathLike | None = None,
        mount: str | os.PathLike | None = None,
        poll: float = 0.002,
        timeout: float | None = None,
        report: str | os.PathLike | None = None,
        clock: Callable[[], float] = time.monotonic,
        listing: Callable[[], dict[str, int]] | None = None,
        staged: Callable[[str], str | None] | None = None,
    ):
        self.job = job
        # path -> size of every file under the folder where it is not on this disk (an object store's listing)
        self.listing = listing
        # an open file of a rank -> the path under the folder it stands for (an object staged before upload)
        self.staged = staged
        self.faults = [f for f in typed(faults, world=job.world) if f.layer == "nemesis"]
        for f in self.faults:
            if f.trigger.size is not None and folder is None:
                raise ConfigError(
                    "folder", f"{f}: a size trigger needs the folder to watch", "pass folder=<the checkpoint root>"
                )
            if isinstance(f, WriterKill) and folder is None:
                raise ConfigError(
                    "folder",
                    f"{f}: a writer is told by the checkpoint files it holds",
                    "pass folder=<the checkpoint root>",
                )
        self.folder = os.path.abspath(str(folder)) if folder is not None else None
        # where the ranks see the checkpoint root (a mount point over it, or the folder itself) -> the root
        self._roots = [(os.path.abspath(str(m)), self.folder or "") for m in (mount, folder) if m is not None]
        self._in_rank: dict[int, dict] = {}  # WriterKill (by id) -> a matching file a target rank held itself
        self._spawned: dict[int, set[int]] = {}  # rank -> processes below it that are no helper
        self._helpers: set[int] = set()
        self._held: dict[int, dict[int, list[Holding]]] = {}  # WriterKill (by id) -> rank -> writers seen
        self.poll, self.clock = poll, clock
        self.timeout = job.timeout if timeout is None else timeout
        self.report = FaultReport(report) if report is not None else None
        self._fired: list[dict] = []
        self._pending = list(self.faults)
        self._resume: list[tuple[float, list[int], Fault]] = []
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._start = 0.0

    def firings(self) -> list[dict]:
        return list(self._fired)

    def not_applicable(self) -> list[tuple[Fault, str]]:
        """The writer kills that never fired because the writing is done inside the rank: a target rank held
        a matching file itself and started no process but helpers. Each with the reason."""
        out: list[tuple[Fault, str]] = []
        for f in self._pending:
            seen = self._in_rank.get(id(f))
            if isinstance(f, WriterKill) and seen is not None and not self._spawned.get(seen["rank"]):
                rel = os.path.relpath(seen["file"], self.folder or "/")
                why = "started no writer process: the writer is a thread of the rank; nothing to kill alone"
                out.append((f, f"rank {seen['rank']} wrote {rel} itself and {why}"))
        return out

    def start(self) -> Nemesis:
        if not self.job.procs:
            raise RuntimeError("start the Job before its nemesis")
        self._start = self.clock()
        self._thread = threading.Thread(target=self._loop, name="nemesis", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
            self._thread = None
        for _, pids, _ in self._resume:  # never leave a rank stopped behind us
            signal_ranks(pids, signal.SIGCONT)
        self._resume = []

    def __enter__(self) -> Nemesis:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()

    # ---- the loop ------------------------------------------------------------------------------
    def _alive(self) -> list[int]:
        return [p.pid for p in self.job.procs if p.is_alive()]

    def _loop(self) -> None:
        deadline = self._start + self.timeout
        while not self._stop.is_set() and self.clock() < deadline:
            now = self.clock() - self._start
            for due in [r for r in self._resume if r[0] <= now]:
                signal_ranks(due[1], signal.SIGCONT)
                self._resume.remove(due)
            for f in list(self._pending):
                seen = self._due(f, now)
                if seen is not None:
                    self._pending.remove(f)
                    self._act(f, now, seen)
            if not self._pending and not self._resume:
                return
            if not self._alive():
                return
            self._stop.wait(self.poll)

    def _due(self, f: Fault, now: float) -> dict | None:
        """What was observed when the trigger of `f` has come, else None."""
        g = f.trigger
        if g.after is not None and now < g.after:
            return None
        if isinstance(f, WriterKill):
            seen = self._held.setdefault(id(f), {})
            for rank, held in self._writers(f).items():
                seen.setdefault(rank, []).extend(h for h in held if h.pid not in {x.pid for x in seen[rank]})
            # several ranks: once each one's writer was seen, so their writers die together
            if not seen or len(seen) < len(f.target.ranks(self.job.world)):
                return None
            return {"elapsed": round(now, 4), "observed": "writer", "held": seen}
        if g.size is None:
            return {"elapsed": round(now, 4)}
        for path, size in self._sizes(f.target.path).items():
            if size >= g.size:
                return {"elapsed": round(now, 4), "observed": "size", "file": path, "bytes": size}
        for rank in f.target.ranks(self.job.world):
            pid = self.job.pids[rank]
            for opened, pos in open_positions(pid).items():
                path = (self.staged(opened) if self.staged is not None else None) or opened
                rel = os.path.relpath(path, self.folder)
                if not rel.startswith("..") and matches_path(f.target.path, path, rel) and pos >= g.size:
                    return {"elapsed": round(now, 4), "observed": "fdinfo", "file": path, "bytes": pos, "of_rank": rank}
        return None

    def _sizes(self, pattern: str | None) -> dict[str, int]:
        if self.listing is None:
            return file_sizes(self.folder, pattern)  # type: ignore[arg-type]  # a size trigger needs the folder
        return {
            p: n for p, n in self.listing().items() if matches_path(pattern, p, os.path.relpath(p, self.folder or "/"))
        }

    def _writers(self, f: WriterKill) -> dict[int, list[Holding]]:
        """rank -> what its background writers hold now (matching files, with at least trigger.size
        bytes); notes what a target rank holds itself and which processes it started."""
        out: dict[int, list[Holding]] = {}
        for rank in f.target.ranks(self.job.world):
            pid = self.job.pids[rank]
            found = []
            for proc in below(pid):
                if proc.pid in self._helpers:
                    continue
                # asked each time: a fork seen before it exec'd or named itself (the launcher's guard) looks
                # like the rank at first, and must not stay counted as a writer it started
                if is_helper(proc):
                    self._helpers.add(proc.pid)
                    self._spawned.get(rank, set()).discard(proc.pid)
                    continue
                self._spawned.setdefault(rank, set()).add(proc.pid)
                found += holdings(proc.pid, self._roots, f.target.path, f.trigger.size)
            if found:
                out[rank] = found
            elif id(f) not in self._in_rank:
                mine = holdings(pid, self._roots, f.target.path, None)
                if mine:
                    self._in_rank[id(f)] = {"rank": rank, "file": mine[0].path}
        return out

    def _kill_writers(self, f: WriterKill, now: float, held: dict[int, list[Holding]]) -> None:
        """SIGKILL the writers seen (and any other writer of a target rank holding a matching file now):
        their trees, or the holders alone. Never a rank."""
        for rank, now_held in self._writers(replace(f, trigger=replace(f.trigger, size=None))).items():
            held.setdefault(rank, [])
            held[rank] += [h for h in now_held if h.pid not in {x.pid for x in held[rank]}]
        ranks = sorted(held)
        rank_pids = set(self.job.pids)
        killed: list[int] = []
        for rank in ranks:
            for h in held[rank]:
                tree = writer_tree(h.pid, self.job.pids[rank]) if f.scope == "tree" else [h.pid]
                killed += [p for p in tree if p not in killed and p not in rank_pids]
        writers = [
            {"rank": r, "pid": h.pid, "process": describe(h.pid), "file": h.path, "bytes": h.bytes}
            for r in ranks
            for h in held[r]
        ]
        reached = signal_ranks(killed, signal.SIGKILL)
        rec = firing(
            f,
            "kill writer",
            ranks=ranks,
            pids=killed,
            reached=reached,
            elapsed=round(now, 4),
            observed="writer",
            writers=writers,
            file=writers[0]["file"],
            bytes=writers[0]["bytes"],
        )
        self._fired.append(rec)
        if self.report is not None:
            self.report.append(rec)

    def _act(self, f: Fault, now: float, seen: dict) -> None:
        if isinstance(f, WriterKill):
            self._kill_writers(f, now, seen["held"])
            return
        ranks = f.target.ranks(self.job.world)
        pids = [self.job.pids[r] for r in ranks]
        everyone = len(ranks) == self.job.world
        if isinstance(f, RankKill):
            reached = signal_ranks(pids, f.signum, tree=everyone)
            action = "preempt" if everyone else f"signal {f.signal}"
        else:
            reached = signal_ranks(pids, signal.SIGSTOP, tree=everyone)
            action = "stop"
            if isinstance(f, RankHang) and f.resume_after is not None:
                self._resume.append((now + f.resume_after, pids, f))
        rec = firing(f, action, ranks=ranks, pids=pids, reached=reached, **seen)
        self._fired.append(rec)
        if self.report is not None:
            self.report.append(rec)
