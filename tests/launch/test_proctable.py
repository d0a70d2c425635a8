"""The process table read from /proc/<pid>/status: a tree, a group, a stopped and a finished process,
on real processes."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time

from resilience.launch.proctable import _descendants_from_table, descendants, group_members, running, state, status

TREE = "import subprocess, sys; subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)']); " + (
    "print('up', flush=True); import time; time.sleep(60)"
)


def _wait_for(predicate, timeout: float = 30.0) -> bool:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if predicate():
            return True
        time.sleep(0.01)
    return False


def test_a_tree_its_group_and_the_states_of_its_processes():
    child = subprocess.Popen([sys.executable, "-c", TREE], stdout=subprocess.PIPE, start_new_session=True)
    try:
        assert child.stdout is not None and child.stdout.readline() == b"up\n"
        assert _wait_for(lambda: len(descendants(child.pid)) == 1), "the grandchild never showed"
        (grandchild,) = descendants(child.pid)
        assert {child.pid, grandchild} <= set(descendants(os.getpid()))  # children, then theirs
        assert descendants(child.pid) == _descendants_from_table(child.pid)  # the children files, the table
        assert status(child.pid) == (os.getpid(), child.pid, child.pid)  # it leads its own group
        assert sorted(group_members(child.pid)) == sorted([child.pid, grandchild])
        os.kill(grandchild, signal.SIGSTOP)
        assert _wait_for(lambda: state(grandchild) == "T")
        os.kill(grandchild, signal.SIGKILL)
        assert _wait_for(lambda: not running(grandchild))  # a zombie until its parent reaps it
    finally:
        os.killpg(child.pid, signal.SIGKILL)
        child.wait(30)
    assert not running(child.pid) and status(child.pid) is None and state(child.pid) is None


def test_a_child_started_by_another_thread_is_a_descendant():
    started: list[subprocess.Popen] = []
    t = threading.Thread(
        target=lambda: started.append(subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"]))
    )
    t.start()
    t.join()
    (child,) = started
    try:
        # the kernel lists a child under the thread that forked it, not under the process
        assert child.pid in descendants(os.getpid())
    finally:
        child.kill()
        child.wait(30)
