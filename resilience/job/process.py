"""One run of the job: the fault-injecting file system mounted at the checkpoint folder, the command
started in a session of its own (dying with the runner), its output read line by line as it comes, and
every process of it killed on the way out, however the run ends.

The mount passes through to the case's folder (`backing`) and its logs name that folder (paths_as), so a
fault aimed at a file of the golden run's layout names the same path in every case. Callers are ranked by
their environment (`RANK`, as torchrun sets it, else `LOCAL_RANK`; fusefs.ranks): the agent and anything
without either is no rank's. The runner itself may kill the whole job (agent and every worker) at a point of
the run: once the mount reports a firing (a write held by a slow fault: the job is in the middle of a save),
or once the job reports a given step (between two saves)."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import tempfile
import threading
import time
import uuid
from collections.abc import Iterable
from dataclasses import dataclass

from ..errors import ConfigError
from ..faults.base import Fault
from ..fusefs.mount import mounted
from ..launch.lifetime import argv_dying_with_parent
from . import tree
from .base import RunOutcome
from .command import RANK_ENV, JobCommand
from .patterns import Patterns, Reader

OUTPUT = "output.log"  # the job's stdout and stderr, as it printed them
# the job's temporary folder (TMPDIR) during a run, removed after it: short, under the system's own, since
# a socket path there has 108 bytes at most (multiprocessing's managers and forkservers put theirs in it)
TEMP_PREFIX = "rjob-"
FS_LOG = "fs"  # the mount's logs (fuse.jsonl, ops.rank<R>.*, firings.jsonl)
READER_WAIT = 10.0  # seconds for the output to end once every process of the run is gone
POLL = 0.01


@dataclass(frozen=True)
class WholeJobKill:
    """When the runner kills the whole job: once the mount fires (`on_firing`), or at the first step it
    reports that is `at_step` or later and comes after its acknowledgement of the save of step `after_ack`
    (an async save is acknowledged late: steps go on while it writes); at that acknowledgement itself with
    `on_ack`, or when it comes once `at_step` was already reported. `reason` names it in the run's record.
    With `node`, that node alone (its agent and workers) is SIGKILLed; the others get `grace` seconds to
    end on their own, as peers of a lost node should, before the rest is killed as a scheduler would."""

    reason: str
    on_firing: bool = False
    at_step: int | None = None
    after_ack: int | None = None
    on_ack: bool = False
    term: bool = False  # SIGTERM every process, as a scheduler preempting the job; SIGKILL `grace` s later
    grace: float = 10.0
    node: int | None = None
    workers_only: bool = False  # the workers alone, not the launcher: torchrun restarts them (elastic.py)


class _Output:
    """The output of every node of the job, read in a thread per node: written to one file in the order it
    comes (and to a file per node), read for what it says, and the whole-job kill made from the reading
    thread the moment its line comes."""

    def __init__(self, folder: str, patterns: Patterns, on_line, nodes: int):
        self.reader = Reader(patterns)
        self._on_line = on_line
        self.lock = threading.Lock()
        self._out = open(os.path.join(folder, OUTPUT), "wb")  # noqa: SIM115 (closed by join())
        self._folder, self._nodes = folder, nodes
        self.threads: list[threading.Thread] = []

    def read(self, stream, node: int) -> None:
        t = threading.Thread(target=self._run, args=(stream, node), name=f"job-output-{node}", daemon=True)
        self.threads.append(t)
        t.start()

    def _run(self, stream, node: int) -> None:
        own = open(os.path.join(self._folder, f"output.node{node}.log"), "wb") if self._nodes > 1 else None  # noqa: SIM115
        try:
            for raw in iter(stream.readline, b""):
                if own is not None:
                    own.write(raw)
                    own.flush()
                with self.lock:
                    if self._out.closed:  # joined: a stray process of the run still printing
                        return
                    self._out.write(raw)
                    self._out.flush()
                    found = self.reader.feed(raw.decode(errors="replace"))
                for kind, step in found:
                    self._on_line(kind, step)
        finally:
            if own is not None:
                own.close()

    def split(self, folder: str) -> Reader:
        """From the next line on, the output goes to `folder`'s output file and a reader of its own (a
        restarted worker group's output is a run of its own); the reader until now is given back."""
        with self.lock:
            self._out.close()
            self._out = open(os.path.join(folder, OUTPUT), "wb")  # noqa: SIM115 (closed by join())
            old, self.reader = self.reader, Reader(self.reader.patterns)
        return old

    def join(self, wait: float) -> None:
        deadline = time.monotonic() + wait
        for t in self.threads:
            t.join(max(0.0, deadline - time.monotonic()))
        with self.lock:
            self._out.close()

    def lines(self) -> int:
        with self.lock:
            return self.reader.observed.lines


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Run:
    """The job's processes while one run lasts: one launcher per node (one in all without --nodes), each in
    a session of its own, marked with a token of its own."""

    def __init__(self, command: JobCommand, ckpt: str, folder: str, patterns: Patterns, kill: WholeJobKill | None):
        token = uuid.uuid4().hex
        self.tokens = [f"{token}.{n}" for n in range(command.nodes)]
        self.kill_plan = kill
        self.killed: str | None = None
        self.killed_at: int | None = None
        self.acked = False  # the save kill.after_ack names was acknowledged
        self.last_step = -1  # the furthest step the run reported
        self.termed_at: float | None = None  # time.monotonic() of a SIGTERM to every process of the run
        self.node_killed_at: float | None = None  # time.monotonic() of a node's kill
        self._lock = threading.Lock()
        self.temp = tempfile.mkdtemp(prefix=TEMP_PREFIX)
        self.output = _Output(folder, patterns, self._heard, command.nodes)
        port = _free_port() if command.nodes > 1 else 0
        self.procs: list[subprocess.Popen] = []
        for node, tok in enumerate(self.tokens):
            try:
                proc = subprocess.Popen(
                    argv_dying_with_parent(command.resolved(ckpt, node, port)),
                    env=command.env(ckpt, tok, self.temp, node, port),
                    cwd=command.cwd,
                    stdout=subprocess.PIPE,
                    stderr=subprocess.STDOUT,
                    stdin=subprocess.DEVNULL,
                    start_new_session=True,
                )
            except OSError as e:
                self.stop()
                raise ConfigError("command", f"cannot start {command.argv[0]!r}: {e.strerror or e}", "") from None
            self.procs.append(proc)
            self.output.read(proc.stdout, node)

    def _heard(self, kind: str, step: int) -> None:
        plan = self.kill_plan
        if plan is None:
            return
        if kind == "metric":
            self.last_step = max(self.last_step, step)
        if kind == "ack" and step == plan.after_ack:
            self.acked = True
            late = plan.at_step is not None and self.last_step >= plan.at_step  # acknowledged past the kill's step
            if plan.on_ack or late:
                self.kill_whole_job(plan.reason)
                return
        if plan.at_step is None and plan.after_ack is None or plan.on_ack:
            return
        if (
            kind == "metric"
            and (plan.at_step is None or step >= plan.at_step)
            and (plan.after_ack is None or self.acked)
        ):
            self.kill_whole_job(plan.reason)

    def next_generation(self, kill: WholeJobKill | None) -> None:
        """The launcher restarted the workers: what the runner kills from now on is `kill`."""
        with self._lock:
            self.kill_plan, self.killed, self.killed_at = kill, None, None
            self.acked, self.last_step = False, -1

    def running(self) -> bool:
        return any(p.poll() is None for p in self.procs)

    def exit_code(self) -> int | None:
        """0 when every node exited 0; else the first node's that did not."""
        codes = [p.returncode for p in self.procs]
        return next((c for c in codes if c != 0), 0) if codes else None

    def kill_whole_job(self, reason: str) -> None:
        with self._lock:
            if self.killed is not None:
                return
            self.killed, self.killed_at = reason, time.monotonic_ns()
        plan = self.kill_plan
        if plan is not None and plan.workers_only:
            for proc, tok in zip(self.procs, self.tokens):
                tree.kill_workers(proc.pid, tok)
            return  # the launcher restarts them
        if plan is not None and plan.node is not None:
            tree.kill_all(self.procs[plan.node].pid, self.tokens[plan.node])
            self.node_killed_at = time.monotonic()
            return  # the run's loop watches what the other nodes do
        if plan is not None and plan.term:
            self.termed_at = time.monotonic()
            for proc, tok in zip(self.procs, self.tokens):
                tree.terminate_all(proc.pid, tok)
            return  # the run's loop gives it TERM_GRACE to end
        self._kill_all()

    def _kill_all(self) -> None:
        for proc, tok in zip(self.procs, self.tokens):
            tree.kill_all(proc.pid, tok)

    def _members(self) -> set[int]:
        return {p for proc, tok in zip(self.procs, self.tokens) for p in tree.members(proc.pid, tok)}

    def left_after_term(self) -> list[dict]:
        """After a SIGTERM: wait out the grace for every process of the run to end; those still there."""
        assert self.termed_at is not None and self.kill_plan is not None
        while time.monotonic() < self.termed_at + self.kill_plan.grace:
            if not self.running() and not self._members():
                return []
            time.sleep(POLL * 5)
        return tree.describe(self._members())

    def after_node_kill(self) -> dict:
        """After a node's kill: wait out the grace for the other nodes to end on their own; what they did."""
        assert self.node_killed_at is not None and self.kill_plan is not None
        node, grace = self.kill_plan.node, self.kill_plan.grace
        others = [(n, p) for n, p in enumerate(self.procs) if n != node]
        while time.monotonic() < self.node_killed_at + grace and any(p.poll() is None for _, p in others):
            time.sleep(POLL * 5)
        waited = time.monotonic() - self.node_killed_at
        rest = {
            str(n): f"exit {p.returncode}" if p.poll() is not None else f"still running after {grace:g} s: killed"
            for n, p in others
        }
        return {"node": node, "others": rest, "waited": round(waited, 2)}

    def hang_report(self) -> dict:
        reports = [tree.hang_report(p.pid, t, self.output.lines) for p, t in zip(self.procs, self.tokens)]
        first = reports[0]
        return first | {"processes": [proc for r in reports for proc in r["processes"]]}

    def stop(self) -> None:
        """Every process of the run killed and reaped, the output read to its end."""
        self._kill_all()
        for proc in self.procs:
            try:
                proc.wait(timeout=READER_WAIT)
            except subprocess.TimeoutExpired:
                pass
        self.output.join(READER_WAIT)
        for proc in self.procs:
            if proc.stdout is not None:
                proc.stdout.close()
        shutil.rmtree(self.temp, ignore_errors=True)


def run_once(
    command: JobCommand,
    *,
    index: int,
    folder: str,
    backing: str,
    mountpoint: str,
    patterns: Patterns,
    timeout: float,
    faults: Iterable[Fault] = (),
    kill: WholeJobKill | None = None,
) -> RunOutcome:
    """Run the command once with the file system mounted at `mountpoint` over `backing`, `faults` carried
    out by the mount; within `timeout` seconds (a run still going then is a hang: its process tree and,
    where the job asked for them, its Python stacks are kept). Nothing of it is left running afterwards."""
    os.makedirs(folder, exist_ok=True)
    os.makedirs(backing, exist_ok=True)
    os.makedirs(mountpoint, exist_ok=True)
    start = time.monotonic()
    hang = None
    timed_out = False
    ignored: list[dict] | None = None
    node_kill: dict | None = None
    with mounted(
        backing, mountpoint, faults=list(faults), log=os.path.join(folder, FS_LOG), paths_as=backing, rank_env=RANK_ENV
    ) as mount:
        run = Run(command, mountpoint, folder, patterns, kill)
        try:
            deadline = start + timeout
            while run.running():
                if kill is not None and kill.on_firing and mount.firings():
                    run.kill_whole_job(kill.reason)
                if run.termed_at is not None or run.node_killed_at is not None:
                    break
                if time.monotonic() > deadline:
                    hang = run.hang_report()
                    timed_out = True
                    break
                time.sleep(POLL)
            if run.termed_at is not None:  # the agent may be gone and its workers not
                ignored = run.left_after_term()
            if run.node_killed_at is not None:
                node_kill = run.after_node_kill()
        finally:
            run.stop()
        firings = tuple(mount.firings())
    return RunOutcome(
        index,
        folder,
        None if timed_out else run.exit_code(),
        time.monotonic() - start,
        run.output.reader.observed,
        timed_out=timed_out,
        killed="timeout" if timed_out else run.killed,
        killed_at=run.killed_at,
        hang=hang,
        firings=firings,
        term_ignored=None if run.termed_at is None else tuple(ignored or ()),
        node_kill=node_kill,
    )


__all__ = ["FS_LOG", "OUTPUT", "Run", "WholeJobKill", "run_once"]
