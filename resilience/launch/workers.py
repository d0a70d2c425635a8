"""Cases side by side: worker processes forked from this one (torch and the checkpoint code already
imported, so a worker starts in milliseconds), each running one item at a time; results come back in the
order they end.

A case keeps about one core busy on average (its ranks wait on each other, the runner builds crash states
and draws reports in between), so two cases at a time fill a 2-core machine. A worker dies with the
process that forked it, and its ranks with the worker. A stop asked of this process (Ctrl-C, SIGTERM)
ends the workers through their own handlers (forked with the runner's), so each tears its ranks down; a
worker still there after a grace period is SIGKILLed, and its ranks with it."""

from __future__ import annotations

import gc
import multiprocessing as mp
import os
import signal
import sys
import time
import traceback
from collections.abc import Callable, Generator, Iterator, Sequence
from multiprocessing.connection import Connection, wait
from typing import Any

from ..errors import ResilienceError
from ..stopping import STOPPING, ask, check as check_stop, held
from .lifetime import die_with_parent

GRACE_SECONDS = 30.0  # a stopped worker's time to tear its ranks down before it is killed


def usable_cpus() -> int:
    return len(_cpus()) or max(1, os.cpu_count() or 1)


class WorkerDied(ResilienceError, RuntimeError):
    """A worker ended while it ran an item (killed from outside, or a crash of the interpreter)."""


class ItemFailed(ResilienceError, RuntimeError):
    """An item's function raised in a worker, with an exception that could not be sent back whole."""


def run_each(
    fn: Callable[[Any], Any],
    items: Sequence,
    workers: int,
    *,
    started: Callable[[int], None] | None = None,
    timeout: float | None = None,
    order: Sequence[int] | None = None,
) -> Generator[tuple[int, Any], None, None]:
    """(index, result) of `fn(item)` for every item, as each ends; `started(index)` as each begins. An
    Exception raised by `fn` comes back as the result (the caller decides); a stop (KeyboardInterrupt and
    its kin) is raised here. An item still running `timeout` seconds after it started has its worker
    SIGKILLed (its ranks with it) and comes back as WorkerDied. `order`: the indices in the order workers
    take them (the longest first keeps the last worker from running alone at the end). With one worker,
    or one item, everything runs in this process, in order (no timeout: the item's own jobs have theirs)."""
    if workers <= 1 or len(items) <= 1:
        for i, item in enumerate(items):
            check_stop()
            if started is not None:
                started(i)
            try:
                result = fn(item)
            except Exception as e:
                result = e
            yield i, result
        return
    pool = _Pool(fn, items, min(workers, len(items)))
    try:
        yield from pool.results(started, timeout, order)
    finally:
        pool.close()


class _Pool:
    def __init__(self, fn: Callable[[Any], Any], items: Sequence, workers: int):
        self.fn, self.items = fn, items
        self.procs: list = []
        self.conns: list = []
        ctx = mp.get_context("fork")
        parent = os.getpid()
        cpus = _cpus()
        try:
            for k in range(workers):
                mine, theirs = ctx.Pipe()
                cpu = cpus[k % len(cpus)] if cpus else None
                p = ctx.Process(
                    target=_worker, args=(fn, items, theirs, parent, list(self.conns), cpu), name="case-worker"
                )
                with held():  # a Ctrl-C landing in the after-fork hooks would be lost there
                    p.start()
                theirs.close()
                self.procs.append(p)
                self.conns.append(mine)
        except BaseException:
            self.close()
            raise

    def results(
        self, started: Callable[[int], None] | None, timeout: float | None, order: Sequence[int] | None
    ) -> Iterator[tuple[int, Any]]:
        todo = list(order if order is not None else range(len(self.items)))[::-1]
        busy: dict = {}  # conn -> (index, process)
        since: dict = {}  # conn -> when its item started

        def give(conn, proc) -> None:
            if todo:
                i = todo.pop()
                conn.send(i)
                busy[conn], since[conn] = (i, proc), time.monotonic()
                if started is not None:
                    started(i)

        for mine, proc in zip(self.conns, self.procs):
            give(mine, proc)
        while busy:
            check_stop()
            for late, (i, proc) in list(busy.items()):
                if timeout is not None and time.monotonic() - since[late] > timeout:
                    _signal(proc.pid, signal.SIGKILL)
                    proc.join(5.0)
                    del busy[late]
                    yield i, WorkerDied(f"it ran longer than {timeout:g} s; its worker was killed")
            for ready in wait(list(busy), timeout=0.5):
                conn: Connection = ready  # type: ignore[assignment]  # only connections are waited on
                i, proc = busy.pop(conn)
                try:
                    kind, value = conn.recv()
                except (EOFError, OSError):
                    proc.join(1.0)
                    yield i, WorkerDied(f"the worker running it ended ({_how(proc.exitcode)})")
                    continue
                yield i, value if kind == "ok" else _unpacked(value)
                give(conn, proc)
        while todo:  # every worker died: nobody is left to run these
            yield todo.pop(), WorkerDied("every worker ended before it could run this")

    def close(self) -> None:
        """Idle workers told to leave; any still running after a stop are asked with SIGTERM, then killed."""
        for conn in self.conns:
            try:
                conn.send(None)
            except OSError:
                pass
        deadline = time.monotonic() + 0.5
        for p in self.procs:
            p.join(max(0.0, deadline - time.monotonic()))
        left = [p for p in self.procs if p.is_alive()]
        for p in left:
            _signal(p.pid, signal.SIGTERM)
        deadline = time.monotonic() + GRACE_SECONDS
        for p in left:
            p.join(max(0.0, deadline - time.monotonic()))
            if p.is_alive():
                _signal(p.pid, signal.SIGKILL)
                p.join(5.0)
        for conn in self.conns:
            conn.close()


def _cpus() -> list[int]:
    try:
        return sorted(os.sched_getaffinity(0))
    except (AttributeError, OSError):  # not Linux
        return []


def _worker(fn, items, conn, parent: int, others: list, cpu: int | None) -> None:
    gc.freeze()  # the runner's heap, inherited: a full collection need not walk it (nor touch its pages)
    die_with_parent(parent)
    if cpu is not None:
        # a case's ranks on one core: their hand-offs in a collective stay on it, and two cases never
        # interleave their ranks on both cores (each then waits on wake-ups across cores)
        os.sched_setaffinity(0, {cpu})
    for sig in STOPPING:  # not the recorders of held(), which the fork copied
        signal.signal(sig, _stop_once)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, set(STOPPING))
    torch = sys.modules.get("torch")
    if torch is not None:  # the runner's OpenMP pool does not survive the fork: a parallel op would wait forever
        torch.set_num_threads(1)
    for other in others:  # the other workers' pipes: only the runner reads them
        other.close()
    status = 0
    try:
        while True:
            i = conn.recv()
            if i is None:
                break
            try:
                out = ("ok", fn(items[i]))
            except Exception as e:
                out = ("error", _packed(e))
            conn.send(out)
    except (KeyboardInterrupt, EOFError, OSError):
        status = 1  # stopped (the runner is on its way out) or the runner is gone
    finally:
        os._exit(status)  # never the runner's atexit handlers (pytest's, a store's) in a worker


def _stop_once(signum: int, frame) -> None:
    """The first stop ends the worker's case through its teardown; later ones must not cut that short."""
    for sig in STOPPING:
        signal.signal(sig, signal.SIG_IGN)
    raise ask(signum)


def _packed(e: Exception):
    """The exception itself if it survives the trip to the runner (an exception class with its own
    constructor arguments may pickle but not unpickle), else its text and traceback."""
    try:
        import pickle

        pickle.loads(pickle.dumps(e))
        return e
    except Exception:
        return f"{type(e).__name__}: {e}\n{traceback.format_exc()}"


def _unpacked(value) -> Exception:
    return value if isinstance(value, Exception) else ItemFailed(str(value))


def _how(code: int | None) -> str:
    if code is None:
        return "still running"
    if code < 0:
        return f"killed by {signal.Signals(-code).name}"
    return f"exit status {code}"


def _signal(pid: int | None, sig: int) -> None:
    try:
        if pid:
            os.kill(pid, sig)
    except ProcessLookupError:
        pass


__all__ = ["ItemFailed", "WorkerDied", "run_each", "usable_cpus"]
