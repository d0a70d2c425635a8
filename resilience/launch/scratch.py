"""Each job's temporary files in one folder of its own, which the runner removes at the job's teardown.

Python's multiprocessing makes a temp folder (pymp-*) in a process the first time it needs one, and
removes it only at a clean interpreter exit. A rank makes one to pass a file descriptor to a spawned
process (DCP's checkpoint process receiving tensors), a spawned Manager (megatron-core's results queue)
makes its own; a rank ends with os._exit or a SIGKILL, the processes it started with its group's
SIGKILL: nothing of theirs removes anything. So the runner makes a folder per job, every rank points
all of its temp folders there before it runs anything, what a rank starts inherits them, and the teardown
removes the folder once they all are gone, however they ended."""

from __future__ import annotations

import multiprocessing as mp
import os
import shutil
import tempfile

PREFIX = "resilience-job-"


def make() -> str:
    """A new, empty job folder in the runner's temp folder (TMPDIR). Short: a Unix socket's path, which
    multiprocessing puts two levels below it, holds at most 107 bytes."""
    return tempfile.mkdtemp(prefix=PREFIX)


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


def remove(folder: str) -> None:
    """Remove a job folder and whatever is in it (the ranks' and their writers' leftovers)."""
    shutil.rmtree(folder, ignore_errors=True)
