"""How the runner applies a scenario's faults (bridge to resilience.faults)."""
from __future__ import annotations

import contextlib


@contextlib.contextmanager
def rank_faults(faults, rank, fault_log):
    raise NotImplementedError("in-process faults are not wired yet")
    yield


def start_nemesis(job, kills, root, history):
    raise NotImplementedError("the external nemesis is not wired yet")


def corrupt(root, action, seed):
    raise NotImplementedError("corruption is not wired yet")


def crash_states(root, case_dir, job_no, action):
    raise NotImplementedError("lost unsynced writes are not wired yet")


def unfired(configured, fired, crashes):
    return []
