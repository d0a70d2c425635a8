"""Rank processes never outlive their runner, however it ends (SIGKILL included), nor do their children.

Two Linux mechanisms, set up at the start of every rank:
- the rank asks the kernel for SIGKILL when its parent ends (prctl PR_SET_PDEATHSIG), then checks that
  the parent is still the one that started it (it may have died in between);
- the rank starts a small guard in its own process group: the guard waits for its own parent-death
  signal and then SIGKILLs the whole group, so what the rank started (megatron-core's forked writers, a
  subprocess) ends with it. The guard holds none of the rank's files or sockets. It is a shell spawned
  under util-linux's setpriv (a forked copy of the rank where either is missing).

The kernel sends the parent-death signal when the *thread* that forked the child ends, not the process:
a Job must be started from a thread that lives until the Job is waited for (every caller here starts
and waits from the same thread). Elsewhere than Linux both are no-ops; the runner's teardown remains.

Known gap: a guard that is itself stopped (SIGSTOP sent to a rank's whole tree) acts only once continued;
the rank still dies with the runner, and a runner that is not SIGKILLed kills every group at teardown."""

from __future__ import annotations

import ctypes
import os
import shutil
import signal
import sys

_PR_SET_PDEATHSIG = 1
_PR_SET_NAME = 15
_GUARD_SIGNAL = signal.SIGUSR1  # the guard's parent-death signal: blocked, then waited for
_LINUX = sys.platform.startswith("linux")


def _prctl(option: int, arg) -> bool:
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        return libc.prctl(option, arg, 0, 0, 0) == 0
    except (OSError, AttributeError):
        return False


def die_with_parent(expected_parent: int | None) -> None:
    """SIGKILL this process when its parent ends. If the parent already changed (`expected_parent` died
    before the request took effect), exit now: nobody is left to wait for this process."""
    if not _LINUX:
        return
    _prctl(_PR_SET_PDEATHSIG, int(signal.SIGKILL))
    if expected_parent is not None and os.getppid() != expected_parent:
        os._exit(1)


# exec'd by a small interpreter that asks for the parent-death signal first (it survives execve)
_EXEC_DYING_WITH_PARENT = (
    "import ctypes, os, sys\n"
    "ctypes.CDLL(None).prctl(1, 9, 0, 0, 0)\n"  # PR_SET_PDEATHSIG, SIGKILL
    "os.getppid() == int(sys.argv[1]) or os._exit(1)\n"
    "os.execvp(sys.argv[2], sys.argv[2:])\n"
)


def argv_dying_with_parent(argv: list[str], parent: int | None = None) -> list[str]:
    """`argv` run so that it is SIGKILLed when `parent` (default: this process) ends: for processes
    started with subprocess (a local torchrun agent), where no Python runs between fork and exec."""
    if not _LINUX:
        return list(argv)
    return [sys.executable, "-c", _EXEC_DYING_WITH_PARENT, str(parent or os.getpid()), *argv]


# The guard as a small shell (util-linux's setpriv asks for the parent-death signal, which survives the
# exec): spawning it costs the rank ~1 ms, where forking a copy of a rank that imported torch costs ~8 ms in
# the rank and ~10 ms more to tear that copy down. SIGURG is ignored by default, so a leader that dies
# before the trap is set is caught by the check of the parent that follows it.
_GUARD_SCRIPT = """leader=$1
trap '' TERM INT HUP
trap 'kill -KILL 0' URG
read -r stat < /proc/$$/stat
set -- $stat
[ "$4" = "$leader" ] || kill -KILL 0
while :; do sleep 3600 & wait $!; done
"""
_SPAWNED_GUARD = (shutil.which("setpriv"), shutil.which("sh")) if _LINUX else (None, None)


def guard_process_group(name: str = "guard") -> int | None:
    """Start a guard that SIGKILLs this process's group once this process ends; the guard's pid.
    Call it from the group leader's main thread (the guard watches the thread that starts it)."""
    if not _LINUX:
        return None
    setpriv, sh = _SPAWNED_GUARD
    if setpriv and sh:
        try:  # in this process's group, holding none of the rank's files or sockets
            return os.posix_spawn(
                setpriv,
                [setpriv, "--pdeathsig", "URG", "--", sh, "-c", _GUARD_SCRIPT, name, str(os.getpid())],
                os.environ,
                setsigmask=(),
                setsigdef=(signal.SIGURG, signal.SIGTERM, signal.SIGINT, signal.SIGHUP),
                file_actions=[(os.POSIX_SPAWN_CLOSE, fd) for fd in inheritable_fds()],
            )
        except OSError:
            pass  # fork one instead
    return _fork_guard(name)


def inheritable_fds() -> list[int]:
    """This process's descriptors above 2 that an exec would keep (Python's own are close-on-exec)."""
    try:
        fds = [int(fd) for fd in os.listdir("/proc/self/fd")]
    except OSError:
        return []
    out = []
    for fd in fds:
        try:
            if fd > 2 and os.get_inheritable(fd):
                out.append(fd)
        except OSError:  # the listing's own descriptor, closed since
            continue
    return out


def _fork_guard(name: str) -> int | None:
    leader = os.getpid()
    group = os.getpgid(0)
    held = {_GUARD_SIGNAL, signal.SIGTERM, signal.SIGINT, signal.SIGHUP}
    old = signal.pthread_sigmask(signal.SIG_BLOCK, held)  # blocked before the fork: the guard cannot miss it
    try:
        pid = os.fork()
    except OSError:
        signal.pthread_sigmask(signal.SIG_SETMASK, old)
        return None
    if pid:
        signal.pthread_sigmask(signal.SIG_SETMASK, old)
        return pid
    try:  # the guard: only SIGKILL (teardown's, or its own) ends it before its leader does
        os.closerange(3, _max_fd())
        _prctl(_PR_SET_NAME, ctypes.c_char_p(name.encode()[:15]))
        _prctl(_PR_SET_PDEATHSIG, int(_GUARD_SIGNAL))
        if os.getppid() == leader:
            signal.sigwait({_GUARD_SIGNAL})
        os.killpg(group, signal.SIGKILL)
    finally:
        os._exit(0)


def _max_fd() -> int:
    try:
        return min(os.sysconf("SC_OPEN_MAX"), 1 << 20)
    except (ValueError, OSError):
        return 1024
