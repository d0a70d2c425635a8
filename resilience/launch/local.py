"""Rank processes forked from a parent that already imported torch, on gloo over loopback.

Forking costs ~0.1 s per group where spawning costs ~2.5 s of imports per rank. The parent binds the
store's socket on a port the OS picks (rank 0 serves it), so parallel runs (pytest-xdist workers) never
collide, and the parent starts no thread that a fork could catch holding a lock."""

from __future__ import annotations

import faulthandler
import gc
import multiprocessing as mp
import os
import signal
import socket
import time
import traceback
from collections.abc import Callable
from datetime import timedelta
from multiprocessing.connection import wait
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist

from ..dist import lazy_gloo
from ..errors import ConfigError, RankFailure, RankTimeout
from ..stopping import check as check_stop, held
from . import rendezvous, scratch
from .lifetime import die_with_parent, guard_process_group
from .outcomes import JobOutcome, RankContext, RankOutcome, check_seconds
from .proctable import descendants, running, state

TEARDOWN_GRACE = 1.0  # seconds between SIGTERM and SIGKILL, as torchrun does (it waits longer)
BLOCKED_AFTER = 10.0  # seconds the other ranks get to end after one raised, before they count as blocked
DYING_GRACE = 0.5  # seconds the ranks still running get to end on their own after one failed, before teardown
STACKS_WAIT = 3.0  # seconds to wait for a rank's faulthandler to write its stacks
LINGER = BLOCKED_AFTER + STACKS_WAIT + 5.0  # seconds a rank that raised stays alive for the runner to end it


def _rank_main(
    rank: int,
    world: int,
    listener: socket.socket,
    fn: Callable,
    args: tuple,
    kwargs: dict,
    conn,
    init_timeout: float,
    log_dir: str | None,
    pin_cpus: bool = False,
    runner: int | None = None,
    temp: str | None = None,
) -> None:
    # Everything the fork inherited is the parent's and lives as long as the rank: out of the collector's
    # reach, a full collection no longer walks (and copies, page by page) the parent's whole heap, some
    # 0.2 s of CPU each time one runs in a rank
    gc.freeze()
    for sig in (signal.SIGTERM, signal.SIGHUP):  # not the runner's handlers (resilience.cli): die as a process does
        signal.signal(sig, signal.SIG_DFL)
    signal.signal(signal.SIGINT, signal.default_int_handler)  # a Python process's own (the fork held a recorder)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT, signal.SIGTERM})  # held by the runner over the fork
    die_with_parent(runner)  # a rank never outlives the runner, even a SIGKILLed one
    os.setpgid(0, 0)  # own process group: teardown reaches anything the rank started
    guard_process_group(f"rank{rank}-guard")  # and what the rank started ends with the rank
    status = 0
    try:
        if temp:
            scratch.use(temp)  # before anything here makes a temporary file: all of them go with the job
        if pin_cpus:
            _pin(rank, world)
        if log_dir:
            fd = os.open(os.path.join(log_dir, f"rank{rank}.log"), os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
            os.dup2(fd, 1)
            os.dup2(fd, 2)
            os.close(fd)
        torch.set_num_threads(1)  # the parent's OpenMP pool does not survive fork; ranks share 2 cores anyway
        store = rendezvous.open_store(rank, world, listener, init_timeout)
        # every rank is on this host: without this gloo looks up the host name, which a slow DNS stalls
        os.environ.setdefault("GLOO_SOCKET_IFNAME", rendezvous.loopback_interface())
        # the job's group connects each pair of ranks on its first exchange (dist.lazy_gloo says why)
        with lazy_gloo():
            dist.init_process_group(
                "gloo", store=store, rank=rank, world_size=world, timeout=timedelta(seconds=init_timeout)
            )
        rendezvous.joined(store, world)
        if log_dir:  # the runner asks for this rank's stacks (into its log) with SIGUSR1 when it may be blocked
            # fd 2 itself (the rank log): sys.stderr may be a caller's capture object (pytest's)
            faulthandler.register(signal.SIGUSR1, file=open(2, "w", closefd=False), all_threads=True)  # noqa: SIM115
        result = fn(RankContext(rank, world, os.getpid()), *args, **kwargs)
        conn.send(("ok", result))
        rendezvous.leave(store, rank, world, init_timeout)
    except BaseException as e:  # a rank reports everything, SystemExit included
        status = 1
        try:
            conn.send(("error", f"{type(e).__name__}: {e}", traceback.format_exc()))
        except Exception:
            pass
        else:
            # Stay alive, connections open, as a training loop that caught the error would: a peer still
            # waiting in a collective for this rank stays blocked, for the runner to see (Job.wait), instead
            # of being freed by this process's sockets closing. The runner ends this process.
            time.sleep(LINGER)
    finally:
        try:
            conn.close()
        finally:
            os._exit(status)  # never run the parent's atexit handlers (pytest's, the store's) in a child


def _pin(rank: int, world: int) -> None:
    """With more ranks than usable CPUs, keep each rank (all its threads) on one CPU, round-robin.
    Unpinned, every collective's hand-offs between oversubscribed ranks wake threads on the other core:
    on 2 cores a 4-rank all_reduce took about twice as long, most of it in the kernel."""
    try:
        cpus = sorted(os.sched_getaffinity(0))
    except (AttributeError, OSError):  # not Linux
        return
    if world > len(cpus):
        os.sched_setaffinity(0, {cpus[rank % len(cpus)]})


class Job:
    """N rank processes running `fn`. Start, optionally poke at them (a nemesis), then wait; or use it as a
    context manager, which tears every rank down on the way out, an exception (Ctrl-C) included.

    Every rank dies with the process that started it, and everything a rank starts dies with the rank
    (see lifetime.py). The kernel ties that to the starting *thread*: start and wait from one thread
    that outlives the Job (every caller here uses the main thread). Their temporary files go too: they
    are kept in a folder of the job's own, removed at teardown (see scratch.py). Timeouts are capped at
    MAX_JOB_TIMEOUT: no job runs unbounded, whatever a scenario asks for."""

    def __init__(
        self,
        fn: Callable,
        world: int,
        *,
        args: tuple = (),
        kwargs: dict | None = None,
        timeout: float = 120.0,
        init_timeout: float = 30.0,
        log_dir: str | os.PathLike | None = None,
        start_method: str = "fork",
        pin_cpus: bool = False,
    ):
        if start_method not in ("fork", "spawn", "forkserver"):
            raise ConfigError("start_method", f"unknown {start_method!r}", "use fork, spawn or forkserver")
        if isinstance(world, bool) or not isinstance(world, int) or world < 1:
            raise ConfigError("world", f"must be a positive integer, got {world!r}")
        timeout = check_seconds("timeout", timeout)
        init_timeout = check_seconds("init_timeout", init_timeout)
        self.fn, self.world, self.args, self.kwargs = fn, world, args, kwargs or {}
        self.timeout, self.init_timeout = timeout, init_timeout
        self.log_dir = str(log_dir) if log_dir else None
        self.start_method = start_method  # fork is the fast path; spawn is kept to measure against
        self.pin_cpus = pin_cpus  # oversubscribed ranks each stay on one CPU (see _pin)
        self.procs: list[mp.Process] = []
        self.conns: list = []
        self.outcome = JobOutcome([RankOutcome(r) for r in range(world)])
        self._listener: socket.socket | None = None
        self._started = 0.0
        self._temp: scratch.JobFolder | None = None  # the ranks' temp folder, made at start

    @property
    def pids(self) -> list[int]:
        return [p.pid for p in self.procs]  # type: ignore[misc]  # started processes: each has a pid

    def __enter__(self) -> Job:
        return self.start() if not self.procs else self

    def __exit__(self, *exc) -> None:
        self.teardown()

    def start(self) -> Job:
        if self.log_dir:
            Path(self.log_dir).mkdir(parents=True, exist_ok=True)
        ctx = mp.get_context(self.start_method)
        # The parent only binds the store's socket; it starts no thread, so forking it stays safe.
        self._listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self._listener.bind(("127.0.0.1", 0))
        # room for every rank's connection at once: a full queue drops a connect, retried a second or more later
        self._listener.listen(max(socket.SOMAXCONN, 4 * self.world))
        self._started = time.monotonic()
        # a forkserver's children have the forkserver as parent (it exits with us): nothing to compare with
        runner = os.getpid() if self.start_method != "forkserver" else None
        self._temp = scratch.JobFolder()
        try:
            for rank in range(self.world):
                parent_end, child_end = ctx.Pipe(duplex=False)
                p = ctx.Process(  # type: ignore[attr-defined]
                    target=_rank_main,
                    name=f"rank{rank}",
                    daemon=True,
                    args=(
                        rank,
                        self.world,
                        self._listener,
                        self.fn,
                        self.args,
                        self.kwargs,
                        child_end,
                        self.init_timeout,
                        self.log_dir,
                        self.pin_cpus,
                        runner,
                        self._temp.path,
                    ),
                )
                # held over the fork: a Ctrl-C landing in the parent's after-fork hooks would be lost there
                with held():
                    p.start()
                child_end.close()
                self.procs.append(p)
                self.conns.append(parent_end)
        except BaseException:
            self.teardown()
            raise
        return self

    def wait(self, timeout: float | None = None) -> JobOutcome:
        """Wait for every rank; after the first failure tear the others down as torchrun would."""
        limit = self.timeout if timeout is None else check_seconds("timeout", timeout)
        deadline = self._started + limit
        pending = {p.sentinel: r for r, p in enumerate(self.procs)}
        readers = {c: r for r, c in enumerate(self.conns)}
        failed = False
        try:
            while pending:
                check_stop()
                left = deadline - time.monotonic()
                if left <= 0:
                    for conn in list(readers):  # results sent just before the deadline count
                        if conn.poll(0):
                            self._receive(readers.pop(conn), conn)
                    self.outcome.timed_out = True
                    for r in pending.values():
                        if not self.outcome.outcomes[r].ok:  # a rank that reported its result only waits to leave
                            self._ended_unfinished(r, "timeout", limit)
                    break
                ready = wait(list(pending) + list(readers), timeout=min(left, 0.5))
                for obj in ready:
                    if obj in readers:
                        rank = readers.pop(obj)
                        self._receive(rank, obj)
                        failed = failed or self.outcome.outcomes[rank].status == "error"
                    elif obj in pending:
                        rank = pending.pop(obj)
                        conn = self.conns[rank]
                        if conn in readers:  # the result may still sit in the pipe
                            self._receive(readers.pop(conn), conn)
                        self._exited(rank)
                        failed = failed or not self.outcome.outcomes[rank].ok
                if failed and pending:
                    self._wait_or_blocked(pending, readers, deadline)
                    # a rank SIGKILLed from outside closes its sockets before it can be reaped: a peer's error
                    # can come first, the killed rank still exiting; let it end, to report it with its signal
                    self._wait_while_running(pending, readers, min(deadline, time.monotonic() + DYING_GRACE))
                    for r in pending.values():
                        if self.outcome.outcomes[r].status == "running" and not self.procs[r].is_alive():
                            self._exited(r)  # it ended on its own (a signal from outside) before the teardown
                        if self.outcome.outcomes[r].status == "running":  # not one that reported (and lingers)
                            self._ended_unfinished(r, "torn_down", limit)
                    break
        finally:
            self.teardown()
        self.outcome.seconds = time.monotonic() - self._started
        return self.outcome

    def _wait_or_blocked(self, pending: dict, readers: dict, deadline: float) -> None:
        """A rank raised: give the others BLOCKED_AFTER seconds to end as well (each raising its own error
        is a symmetric failure). A rank still running then is blocked (in a collective the failed rank
        never joins, as a real job would hang): its Python stacks are taken (faulthandler, SIGUSR1) before the
        teardown. Not once a rank was killed by a signal (seen, maybe, after the error it caused a peer)."""
        raised = [o for o in self.outcome.outcomes if o.status == "error"]
        if not raised or not self.log_dir:
            return
        self._wait_while_running(pending, readers, min(deadline, time.monotonic() + BLOCKED_AFTER))
        if self.outcome.killed:
            return  # peers waiting on a dead rank are expected; the caller tears them down
        for r in list(pending.values()):
            out = self.outcome.outcomes[r]
            if out.status != "running" or _is_stopped(self.procs[r].pid):
                continue
            out.status, out.seconds = "blocked", time.monotonic() - self._started
            out.error = (
                f"still running {BLOCKED_AFTER:g} s after rank {raised[0].rank} raised "
                f"{raised[0].error.splitlines()[0][:200] if raised[0].error else 'an error'}; killed"
            )
            out.stacks = self._stacks(r)

    def _wait_while_running(self, pending: dict, readers: dict, end: float) -> None:
        """Read the ranks' reports and reap the ranks that end, until none is still running or `end`."""
        while time.monotonic() < end and any(self.outcome.outcomes[r].status == "running" for r in pending.values()):
            check_stop()
            for obj in wait(list(pending) + list(readers), timeout=min(0.5, max(0.0, end - time.monotonic()))):
                self._take(obj, pending, readers)

    def _take(self, obj, pending: dict, readers: dict) -> None:
        """One object a wait found ready: a rank's report read, or an ended rank reaped (its report first)."""
        if obj in readers:
            self._receive(readers.pop(obj), obj)
        elif obj in pending:
            rank = pending.pop(obj)
            if self.conns[rank] in readers:
                self._receive(readers.pop(self.conns[rank]), self.conns[rank])
            self._exited(rank)

    def _stacks(self, rank: int) -> str:
        """A running rank's Python stacks (every thread): its faulthandler appends them to its log on SIGUSR1."""
        assert self.log_dir is not None
        path = os.path.join(self.log_dir, f"rank{rank}.log")
        try:
            start = os.path.getsize(path)
            os.kill(self.procs[rank].pid, signal.SIGUSR1)  # type: ignore[arg-type]  # a started process
        except (OSError, ProcessLookupError):
            return ""
        end = time.monotonic() + STACKS_WAIT
        text, before = "", -1
        while time.monotonic() < end:  # faulthandler writes from its C handler: done once the size holds
            time.sleep(0.1)
            try:
                with open(path, "rb") as f:
                    f.seek(start)
                    text = f.read().decode(errors="replace")
            except OSError:
                break
            if text and len(text) == before:
                break
            before = len(text)
        at = text.find("Thread 0x") if "Thread 0x" in text else text.find("Current thread")
        return text[max(at, 0) :][-20000:]

    def _ended_unfinished(self, rank: int, status: str, limit: float) -> None:
        """A rank still running when the job ends: timed out or torn down, unless it is stopped (SIGSTOP,
        a hung node), which is said as such: a stopped rank explains the others' waits."""
        out = self.outcome.outcomes[rank]
        out.seconds = time.monotonic() - self._started
        if _is_stopped(self.procs[rank].pid):
            out.status = "stopped"
            when = f"at the timeout of {limit:g} s" if status == "timeout" else "when another rank failed"
            out.error = (
                f"rank {rank} was stopped (SIGSTOP, process state 'stopped') and never continued: "
                f"still stopped {when}; killed"
            )
        else:
            out.status = status
            if status == "timeout":
                out.error = f"still running when the timeout of {limit:g} s expired; killed"
                if self.log_dir:  # where it waited: what a hang verdict names
                    out.stacks = self._stacks(rank)

    def _receive(self, rank: int, conn) -> None:
        out = self.outcome.outcomes[rank]
        try:
            msg = conn.recv()
        except (EOFError, OSError):
            return
        if msg[0] == "ok":
            out.status, out.result = "ok", msg[1]
        else:
            out.status, out.error, out.traceback = "error", msg[1], msg[2]
        out.seconds = time.monotonic() - self._started

    def _exited(self, rank: int) -> None:
        p, out = self.procs[rank], self.outcome.outcomes[rank]
        p.join(timeout=5)
        out.exitcode = p.exitcode
        if p.exitcode is not None and p.exitcode < 0:
            out.status, out.signal = "signal", -p.exitcode
        elif out.status == "running":
            out.status = "exit"

    def kill(self, rank: int, sig: int = signal.SIGKILL) -> None:
        """Send a signal to one rank process (the nemesis)."""
        os.kill(self.procs[rank].pid, sig)  # type: ignore[arg-type]  # a started process

    def teardown(self) -> None:
        """Stop every rank and everything it started; reap them all. Safe to call twice. A second Ctrl-C or
        SIGTERM waits until it is done (a few seconds at most) rather than cutting it short."""
        with held():
            self._teardown()

    def _teardown(self) -> None:
        groups = []
        for p in self.procs:
            if p.pid is None:
                continue
            kids = descendants(p.pid)  # from status, never stat: a child mid-exec must not stall the teardown
            groups.append((p, kids))
            if p.is_alive():
                _signal_group(p.pid, signal.SIGTERM)
                _signal_group(p.pid, signal.SIGCONT)  # a stopped rank acts on SIGTERM only once continued
        end = time.monotonic() + TEARDOWN_GRACE
        for p, _ in groups:
            p.join(timeout=max(0.0, end - time.monotonic()))
        for p, kids in groups:
            _signal_group(p.pid, signal.SIGKILL)  # type: ignore[arg-type]  # groups hold started processes
            for k in kids:
                try:
                    os.kill(k, signal.SIGKILL)
                except OSError:  # gone already
                    pass
            p.join(timeout=5)
            _signal_group(p.pid, signal.SIGCONT)  # type: ignore[arg-type]  # a stopped process dies once continued
        # what the ranks started is not ours to reap, but it is gone before teardown returns
        _wait_gone([k for _, kids in groups for k in kids], timeout=5.0)
        for c in self.conns:
            c.close()
        self.conns = []
        if self._listener is not None:
            self._listener.close()
            self._listener = None
        if self._temp is not None:  # after every process that could still write there is gone
            self._temp.remove()
            self._temp = None


def _wait_gone(pids: list[int], timeout: float) -> None:
    """Until each process is dead or a zombie (reaping it is its new parent's; a container's PID 1 may not)."""
    end = time.monotonic() + timeout
    while pids and time.monotonic() < end:
        pids = [p for p in pids if running(p)]
        if pids:
            time.sleep(0.01)


def _is_stopped(pid: int | None) -> bool:
    return pid is not None and state(pid) in ("T", "t")


def _signal_group(pid: int, sig: int) -> None:
    try:
        os.killpg(pid, sig)
    except (ProcessLookupError, PermissionError):
        try:
            os.kill(pid, sig)
        except (ProcessLookupError, PermissionError):
            pass


def run_ranks(
    fn: Callable,
    world: int,
    *,
    args: tuple = (),
    kwargs: dict | None = None,
    timeout: float = 120.0,
    init_timeout: float = 30.0,
    log_dir: str | os.PathLike | None = None,
    start_method: str = "fork",
) -> list[Any]:
    """Run `fn(ctx, *args, **kwargs)` on `world` rank processes; return their results in rank order.
    Raises RankFailure (or RankTimeout) with `failures: {rank: ...}` when any rank fails."""
    outcome = (
        Job(
            fn,
            world,
            args=args,
            kwargs=kwargs,
            timeout=timeout,
            init_timeout=init_timeout,
            log_dir=log_dir,
            start_method=start_method,
        )
        .start()
        .wait()
    )
    if outcome.timed_out:
        raise RankTimeout(outcome.failures, f"ranks did not finish within {timeout:g} s")
    if not outcome.ok:
        raise RankFailure(outcome.failures)
    return outcome.results
