"""Every process of one run of the job: found, described for a hang report, and killed.

torchrun starts each worker in a session of its own, so the job's process group is only the agent's: the
whole job is the agent's process tree, every process group a member of it leads, and every process that
carries the run's token in its environment (command.RUN_ENV): a worker the agent's death left behind is
reparented away from the tree but keeps its environment. The process table is read through
/proc/<pid>/status (launch.proctable, never held shut); /proc/<pid>/environ is held while that process
execs, so it is read in a thread of its own with a deadline."""

from __future__ import annotations

import os
import signal
import threading
import time

from ..fusefs.ranks import environ_value
from ..launch.proctable import descendants, group_members, running, status
from .command import RANK_ENV, RUN_ENV

RESTART_ENV = "TORCHELASTIC_RESTART_COUNT"  # set by torchrun's agent in every worker it starts
KILL_ROUNDS = 10  # rounds of SIGKILL until nothing of the run is left (a process forked while we killed)
SCAN_WAIT = 5.0  # seconds for one scan of the process table for the run's token
STACKS_WAIT = 5.0  # seconds, at most, for faulthandler to write the stacks of a job that asked for them
STACKS_QUIET = 0.5  # seconds without a new line of output after which the dumps are taken as written
_SIGUSR1_BIT = 1 << (signal.SIGUSR1 - 1)


def _marked(token: str) -> set[int]:
    """Processes whose environment holds the run's token (scanned in a thread, within SCAN_WAIT)."""
    found: set[int] = set()
    me = os.getpid()

    def scan() -> None:
        for name in os.listdir("/proc"):
            if name.isdigit() and int(name) != me and environ_value(int(name), RUN_ENV) == token:
                found.add(int(name))

    t = threading.Thread(target=scan, name="job-scan", daemon=True)
    t.start()
    t.join(SCAN_WAIT)
    return set(found)


def members(root: int, token: str, *, scan: bool = True) -> set[int]:
    """The run's live processes: `root`, its tree, the groups they lead, and (`scan`) those holding the
    token anywhere in the process table."""
    pids = {root, *descendants(root)} if running(root) else set(descendants(root))
    if scan:
        pids |= _marked(token)
    for pid in list(pids):
        st = status(pid)
        if st is not None and st[1] == pid:  # a group leader: a torchrun worker, with what it forked
            pids |= set(group_members(pid))
    return {p for p in pids if running(p)}


def kill_all(root: int, token: str, spared: set[int] | None = None) -> list[int]:
    """SIGKILL every process of the run (their groups first: what they fork dies with them); repeated until
    none is left. Never the runner or its group. The pids killed."""
    own = {os.getpid(), os.getpgid(0)} | (spared or set())
    killed: set[int] = set()
    first = [p for p in [root, *descendants(root)] if p not in own]  # at once, before any table scan
    for pid in first:
        st = status(pid)
        if st is not None and st[1] == pid:
            _signal(pid, signal.SIGKILL, group=True)
        _signal(pid, signal.SIGKILL)
    killed |= set(first)
    for n in range(KILL_ROUNDS):
        pids = members(root, token, scan=n > 0) - own  # the tree at once, then the strays too
        if not pids and n > 0:
            break
        for pid in pids:
            st = status(pid)
            if st is not None and st[1] == pid and pid not in own:
                _signal(pid, signal.SIGKILL, group=True)
            _signal(pid, signal.SIGKILL)
        killed |= pids
        time.sleep(0.05)
    return sorted(killed)


def kill_workers(root: int, token: str) -> list[int]:
    """SIGKILL the run's workers, the processes holding a rank in their environment (and the groups they
    lead: what they forked), never the launcher above them: torchrun's agent sees its workers fail and
    restarts them, as after a rank's crash. The pids killed."""
    own = {os.getpid(), os.getpgid(0)}
    # the agent's tree only, at once: the workers are its children, and a scan of the whole process
    # table for the token takes seconds on a loaded machine, while the workers go on writing the next save
    workers = sorted(p for p in members(root, token, scan=False) - own if _env(p, RANK_ENV) is not None)
    for pid in workers:
        st = status(pid)
        if st is not None and st[1] == pid:
            _signal(pid, signal.SIGKILL, group=True)
        _signal(pid, signal.SIGKILL)
    return workers


def restart_count(pid: int) -> int | None:
    """The restart of its worker group a torchrun worker belongs to (TORCHELASTIC_RESTART_COUNT); None for
    a process that is no torchrun worker."""
    value = _env(pid, RESTART_ENV)
    return int(value) if value is not None and value.isdigit() else None


def terminate_all(root: int, token: str) -> list[int]:
    """SIGTERM every process of the run once, as a scheduler that preempts a job does (never the runner or
    its group). The pids signalled."""
    own = {os.getpid(), os.getpgid(0)}
    pids = sorted(members(root, token) - own)
    for pid in pids:
        _signal(pid, signal.SIGTERM)
    return pids


def _signal(pid: int, sig: int, group: bool = False) -> None:
    try:
        (os.killpg if group else os.kill)(pid, sig)
    except (ProcessLookupError, PermissionError):
        pass


def describe(pids: set[int]) -> list[dict]:
    """pid, parent, state, rank, what the kernel says it waits in, and its command line, of each process."""
    out = []
    for pid in sorted(pids):
        st = status(pid)
        out.append(
            {
                "pid": pid,
                "ppid": st[0] if st else None,
                "state": _field(pid, "State"),
                "rank": _env(pid, RANK_ENV),
                "wchan": _read(f"/proc/{pid}/wchan"),
                "cmdline": _read(f"/proc/{pid}/cmdline").replace("\0", " ").strip()[:300],
            }
        )
    return out


def asks_for_stacks(pid: int) -> bool:
    """Whether the process catches SIGUSR1: a Python job that ran faulthandler.register(SIGUSR1) does, and
    writes every thread's stack when it gets one. Never sent to a process that does not catch it (its
    default action ends it)."""
    caught = _field(pid, "SigCgt")
    try:
        return bool(int(caught or "0", 16) & _SIGUSR1_BIT)
    except ValueError:
        return False


def hang_report(root: int, token: str, output_lines) -> dict:
    """What a run that did not end in time was doing: its process tree, and, from the processes that asked
    for it with faulthandler, every Python thread's stack (written to the run's output, from the line
    given back)."""
    pids = members(root, token)
    tree = describe(pids)
    asked = [p for p in sorted(pids) if asks_for_stacks(p)]
    before = output_lines()
    for pid in asked:
        _signal(pid, signal.SIGUSR1)
    if asked:
        _wait_for_dumps(output_lines, before)
    return {
        "processes": tree,
        "stacks_from": asked,
        "stacks_at_line": before + 1 if asked else None,
        "stacks": f"faulthandler stacks in the output from line {before + 1}"
        if asked
        else "no process of the job catches SIGUSR1 (faulthandler.register): its process tree only",
    }


def _wait_for_dumps(output_lines, before: int) -> None:
    """Until the output has grown and then stayed quiet for STACKS_QUIET (each process's dump is many small
    writes, several processes dump at once, and a loaded machine schedules them late: a fixed pause after
    the first line cut the stacks short), or STACKS_WAIT in all."""
    start = time.monotonic()
    seen, changed = before, start
    while time.monotonic() - start < STACKS_WAIT:
        now = output_lines()
        if now != seen:
            seen, changed = now, time.monotonic()
        elif seen != before and time.monotonic() - changed >= STACKS_QUIET:
            return
        time.sleep(0.05)


def _env(pid: int, name: str, wait: float = 1.0) -> str | None:
    out: list[str | None] = []
    t = threading.Thread(target=lambda: out.append(environ_value(pid, name)), name="job-environ", daemon=True)
    t.start()
    t.join(wait)
    return out[0] if out else None


def _field(pid: int, key: str) -> str | None:
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith(key + ":"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        return None
    return None


def _read(path: str) -> str:
    try:
        with open(path, "rb") as f:
            return f.read(4096).decode(errors="replace")
    except OSError:
        return ""


__all__ = ["asks_for_stacks", "describe", "hang_report", "kill_all", "kill_workers", "members", "restart_count"]
