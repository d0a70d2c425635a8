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
import subprocess
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
TEMP = "tmp"  # the job's temporary folder (TMPDIR) during a run, removed after it
FS_LOG = "fs"  # the mount's logs (fuse.jsonl, ops.rank<R>.*, firings.jsonl)
READER_WAIT = 10.0  # seconds for the output to end once every process of the run is gone
POLL = 0.01


@dataclass(frozen=True)
class WholeJobKill:
    """When the runner kills the whole job: once the mount fires (`on_firing`), or at the first step it
    reports that is `at_step` or later and comes after its acknowledgement of the save of step `after_ack`
    (an async save is acknowledged late: steps go on while it writes); at that acknowledgement itself with
    `on_ack`, or when it comes once `at_step` was already reported. `reason` names it in the run's record."""

    reason: str
    on_firing: bool = False
    at_step: int | None = None
    after_ack: int | None = None
    on_ack: bool = False
    term: bool = False  # SIGTERM every process, as a scheduler preempting the job; SIGKILL `grace` s later
    grace: float = 10.0


class _Output:
    """The job's output, read in a thread: written to its file as it comes, read for what it says, and the
    whole-job kill made from this thread the moment its line comes."""

    def __init__(self, stream, path: str, patterns: Patterns, on_line):
        self.reader = Reader(patterns)
        self._stream, self._path, self._on_line = stream, path, on_line
        self.lock = threading.Lock()
        self.thread = threading.Thread(target=self._run, name="job-output", daemon=True)
        self.thread.start()

    def _run(self) -> None:
        with open(self._path, "wb") as out:
            for raw in iter(self._stream.readline, b""):
                out.write(raw)
                out.flush()
                with self.lock:
                    found = self.reader.feed(raw.decode(errors="replace"))
                for kind, step in found:
                    self._on_line(kind, step)

    def lines(self) -> int:
        with self.lock:
            return self.reader.observed.lines


class _Run:
    """The job's processes while one run lasts."""

    def __init__(self, command: JobCommand, ckpt: str, folder: str, patterns: Patterns, kill: WholeJobKill | None):
        self.token = uuid.uuid4().hex
        self.kill_plan = kill
        self.killed: str | None = None
        self.killed_at: int | None = None
        self.acked = False  # the save kill.after_ack names was acknowledged
        self.last_step = -1  # the furthest step the run reported
        self.termed_at: float | None = None  # time.monotonic() of a SIGTERM to every process of the run
        self._lock = threading.Lock()
        self.temp = os.path.join(folder, TEMP)
        os.makedirs(self.temp, exist_ok=True)
        try:
            self.proc = subprocess.Popen(
                argv_dying_with_parent(command.resolved(ckpt)),
                env=command.env(ckpt, self.token, os.path.abspath(self.temp)),
                cwd=command.cwd,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
            )
        except OSError as e:
            shutil.rmtree(self.temp, ignore_errors=True)
            raise ConfigError("command", f"cannot start {command.argv[0]!r}: {e.strerror or e}", "") from None
        assert self.proc.stdout is not None
        self.output = _Output(self.proc.stdout, os.path.join(folder, OUTPUT), patterns, self._heard)

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

    def kill_whole_job(self, reason: str) -> None:
        with self._lock:
            if self.killed is not None:
                return
            self.killed, self.killed_at = reason, time.monotonic_ns()
        if self.kill_plan is not None and self.kill_plan.term:
            self.termed_at = time.monotonic()
            tree.terminate_all(self.proc.pid, self.token)
            return  # the run's loop gives it TERM_GRACE to end
        tree.kill_all(self.proc.pid, self.token)

    def left_after_term(self) -> list[dict]:
        """After a SIGTERM: wait out the grace for every process of the run to end; those still there."""
        assert self.termed_at is not None and self.kill_plan is not None
        while time.monotonic() < self.termed_at + self.kill_plan.grace:
            if self.proc.poll() is not None and not tree.members(self.proc.pid, self.token):
                return []
            time.sleep(POLL * 5)
        return tree.describe(tree.members(self.proc.pid, self.token))

    def stop(self) -> None:
        """Every process of the run killed and reaped, the output read to its end."""
        tree.kill_all(self.proc.pid, self.token)
        try:
            self.proc.wait(timeout=READER_WAIT)
        except subprocess.TimeoutExpired:
            pass
        self.output.thread.join(READER_WAIT)
        if self.proc.stdout is not None:
            self.proc.stdout.close()
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
    with mounted(
        backing, mountpoint, faults=list(faults), log=os.path.join(folder, FS_LOG), paths_as=backing, rank_env=RANK_ENV
    ) as mount:
        run = _Run(command, mountpoint, folder, patterns, kill)
        try:
            deadline = start + timeout
            while run.proc.poll() is None:
                if kill is not None and kill.on_firing and mount.firings():
                    run.kill_whole_job(kill.reason)
                if run.termed_at is not None:
                    break
                if time.monotonic() > deadline:
                    hang = tree.hang_report(run.proc.pid, run.token, run.output.lines)
                    timed_out = True
                    break
                time.sleep(POLL)
            if run.termed_at is not None:  # the agent may be gone and its workers not
                ignored = run.left_after_term()
        finally:
            run.stop()
        firings = tuple(mount.firings())
    return RunOutcome(
        index,
        folder,
        None if timed_out else run.proc.returncode,
        time.monotonic() - start,
        run.output.reader.observed,
        timed_out=timed_out,
        killed="timeout" if timed_out else run.killed,
        killed_at=run.killed_at,
        hang=hang,
        firings=firings,
        term_ignored=None if run.termed_at is None else tuple(ignored or ()),
    )


__all__ = ["FS_LOG", "OUTPUT", "WholeJobKill", "run_once"]
