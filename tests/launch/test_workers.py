"""Worker processes that run items side by side (launch.workers): every item's result comes back once,
an item's exception comes back as its result, a worker that dies costs only its item, and a stop leaves
no worker behind."""

from __future__ import annotations

import os
import signal
import time

import psutil
import pytest

from resilience.launch.workers import WorkerDied, run_each

pytestmark = pytest.mark.multiprocess


def _square_or_fail(x: int):
    if x == 3:
        raise ValueError("three is not allowed")
    time.sleep(0.01 * (x % 3))  # items end out of order
    return x * x, os.getpid()


def test_every_item_comes_back_once_from_the_workers():
    out = dict(run_each(_square_or_fail, list(range(8)), 2))
    assert sorted(out) == list(range(8))
    assert isinstance(out[3], ValueError) and "three is not allowed" in str(out[3])
    assert {i: v[0] for i, v in out.items() if i != 3} == {i: i * i for i in range(8) if i != 3}
    pids = {v[1] for i, v in out.items() if i != 3}
    assert os.getpid() not in pids and 1 <= len(pids) <= 2  # forked workers ran them, not this process


class _TwoArgs(Exception):
    def __init__(self, what: str, where: str):
        super().__init__(f"{what} at {where}")


def _raise_two_args(_):
    raise _TwoArgs("broken", "here")


def test_an_exception_that_cannot_be_rebuilt_comes_back_as_its_text():
    out = dict(run_each(_raise_two_args, [0, 1], 2))
    assert all(isinstance(v, Exception) and "_TwoArgs: broken at here" in str(v) for v in out.values()), out


def test_one_worker_runs_everything_here_in_order():
    out = list(run_each(_square_or_fail, [1, 2], 1))
    assert [i for i, _ in out] == [0, 1] and {v[1] for _, v in out} == {os.getpid()}


def _die_on_two(x: int):
    if x == 2:
        os.kill(os.getpid(), signal.SIGKILL)
    return x


def test_a_worker_that_dies_costs_only_its_item():
    out = dict(run_each(_die_on_two, list(range(6)), 2))
    assert sorted(out) == list(range(6))
    assert isinstance(out[2], WorkerDied) and "SIGKILL" in str(out[2])
    assert {i: v for i, v in out.items() if i != 2} == {i: i for i in range(6) if i != 2}


def _affinity(_):
    return sorted(os.sched_getaffinity(0))


@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="needs two usable CPUs to tell the workers apart")
def test_each_worker_keeps_its_case_on_one_cpu():
    out = dict(run_each(_affinity, list(range(4)), 2))
    assert all(len(v) == 1 for v in out.values()), out


def _sleep(_):
    time.sleep(60)


def test_a_stop_leaves_no_worker_behind():
    before = {p.pid for p in psutil.Process().children(recursive=True)}
    started: list[int] = []
    results = run_each(_sleep, list(range(4)), 2, started=started.append)

    def stop(signum, frame):
        raise KeyboardInterrupt

    old = signal.signal(signal.SIGALRM, stop)  # a Ctrl-C of this process alone, while it waits for the items
    signal.setitimer(signal.ITIMER_REAL, 1.0)
    try:
        with pytest.raises(KeyboardInterrupt):
            for _ in results:
                raise AssertionError("a sleeping item ended")
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)
    left = [p for p in psutil.Process().children(recursive=True) if p.pid not in before and p.is_running()]
    assert started == [0, 1] and not [p for p in left if p.status() != psutil.STATUS_ZOMBIE], left


def _sqrt_sum(n: int) -> float:
    import torch

    return float(torch.arange(float(n * 100_000)).sqrt().sum())


def test_workers_run_torch_after_the_runner_used_its_thread_pool():
    import torch

    torch.set_num_threads(2)
    _sqrt_sum(3)  # an OpenMP pool in this process before the fork: a worker must not wait on it
    out = dict(run_each(_sqrt_sum, [1, 2, 3], 2, timeout=60))
    assert sorted(out) == [0, 1, 2] and all(isinstance(v, float) for v in out.values()), out


def test_an_item_past_its_timeout_comes_back_as_its_worker_killed():
    out = dict(run_each(_sleep, [1, 2], 2, timeout=1.0))
    assert sorted(out) == [0, 1] and all(
        isinstance(v, WorkerDied) and "longer than 1 s" in str(v) for v in out.values()
    )
