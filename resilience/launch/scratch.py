"""Each job's temporary files in one folder of its own, removed with the job however its processes end.

Python's multiprocessing makes a temp folder (pymp-*) in a process the first time it needs one, and
removes it only at a clean interpreter exit. A rank makes one to pass a file descriptor to a spawned
process (DCP's checkpoint process receiving tensors), a spawned Manager (megatron-core's results queue)
makes its own; a rank ends with os._exit or a SIGKILL, the processes it started with its group's
SIGKILL: nothing of theirs removes anything. So the runner makes a folder per job, every rank points
all of its temp folders there before it runs anything, what a rank starts inherits them, and the
teardown removes the folder once they all are gone.

A runner that is SIGKILLed never tears down: a small reaper removes the folder then. It waits on a pipe
whose write end the runner and its forked processes (ranks, forked writers) hold, and reads its end only
once the last of them is gone: the folder goes after everything that could still write there."""

from __future__ import annotations

import multiprocessing as mp
import os
import shutil
import signal
import sys
import tempfile

from .lifetime import inheritable_fds

PREFIX = "resilience-job-"

# stdin is the pipe's read end; TERM, INT and HUP (a Ctrl-C to the terminal's group) are the runner's to act on
_REAPER = """trap '' TERM INT HUP
read -r _ || :
rm -rf -- "$1"
"""
_SH = shutil.which("sh") if sys.platform.startswith("linux") else None


class JobFolder:
    """A new, empty folder in the runner's temp folder (TMPDIR) for one job's temporary files. Its name is
    short: a Unix socket's path, which multiprocessing puts two levels below it, holds at most 107 bytes."""

    def __init__(self) -> None:
        self.path = tempfile.mkdtemp(prefix=PREFIX)
        self._reaper: int | None = None
        self._held: int | None = None  # the pipe's write end: while it is open the reaper waits
        if _SH is None:
            return
        read_end, self._held = os.pipe()  # both close-on-exec: only forked processes hold the write end
        try:
            self._reaper = os.posix_spawn(
                _SH,
                [_SH, "-c", _REAPER, "resilience-job-reaper", self.path],
                os.environ,
                file_actions=[(os.POSIX_SPAWN_DUP2, read_end, 0)]
                + [(os.POSIX_SPAWN_CLOSE, fd) for fd in inheritable_fds()],
                setpgroup=0,  # out of the terminal's foreground group
                setsigmask=(),
            )
        except OSError:
            os.close(self._held)
            self._held = None  # the teardown still removes it; a SIGKILLed runner leaves it
        finally:
            os.close(read_end)

    def remove(self) -> None:
        """Remove the folder and whatever is in it (the ranks' and their writers' leftovers), and end its
        reaper. Safe to call twice."""
        shutil.rmtree(self.path, ignore_errors=True)
        if self._reaper is not None:
            try:
                os.kill(self._reaper, signal.SIGKILL)
                os.waitpid(self._reaper, 0)
            except (ProcessLookupError, ChildProcessError):
                pass
            self._reaper = None
        if self._held is not None:
            os.close(self._held)
            self._held = None


def use(folder: str) -> None:
    """This process and everything it starts keep their temporary files in `folder`. Call it first
    thing in a rank."""
    os.environ["TMPDIR"] = folder  # a new interpreter (a spawned writer, a Manager) and most tools read it
    tempfile.tempdir = folder  # this process and its forks: tempfile caches the folder it found first
    # multiprocessing's own, inherited over the fork if the runner had made one: the rank makes its own
    # (in `folder`), or its listeners would gather in the runner's until the runner exits
    config = getattr(mp.current_process(), "_config", None)
    if isinstance(config, dict):
        config.pop("tempdir", None)
