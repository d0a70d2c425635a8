import os
import signal
import time

import psutil
import pytest
import torch
import torch.distributed as dist

from resilience.errors import ConfigError, RankFailure, RankTimeout
from resilience.launch import Job, run_ranks

pytestmark = pytest.mark.multiprocess


def _all_reduce_rank(ctx):
    t = torch.tensor([float(ctx.rank)])
    dist.all_reduce(t)
    return ctx.rank, t.item(), os.getpid()


def test_eight_ranks_run_a_real_collective():
    results = run_ranks(_all_reduce_rank, 8, timeout=60)
    assert [r[0] for r in results] == list(range(8))
    assert {r[1] for r in results} == {28.0}
    assert len({r[2] for r in results}) == 8 and os.getpid() not in {r[2] for r in results}


def _collectable(ctx):
    import gc

    return gc.get_freeze_count(), gc.isenabled()


def test_what_a_rank_inherits_is_out_of_the_collectors_reach():
    """A full collection in a rank would walk the parent's whole heap: the inherited objects are frozen,
    the collector still runs for the rank's own."""
    for inherited, enabled in run_ranks(_collectable, 2):
        assert inherited > 1000 and enabled


def _fail_on_rank_3(ctx):
    if ctx.rank == 3:
        raise ValueError("rank three is broken")
    dist.barrier()


def test_exception_comes_back_with_its_traceback():
    with pytest.raises(RankFailure) as e:
        run_ranks(_fail_on_rank_3, 4, timeout=60)
    assert "ValueError: rank three is broken" in e.value.failures[3]
    assert "_fail_on_rank_3" in e.value.failures[3]  # the traceback names the function


def _sigkill_rank_1(ctx):
    if ctx.rank == 1:
        os.kill(os.getpid(), signal.SIGKILL)
    dist.barrier()


def test_killed_rank_is_reported_with_its_signal_and_others_torn_down():
    outcome = Job(_sigkill_rank_1, 3, timeout=60).start().wait()
    assert outcome.outcomes[1].status == "signal" and outcome.outcomes[1].signal == signal.SIGKILL
    assert outcome.first_failure().rank == 1
    assert {outcome.outcomes[r].status for r in (0, 2)} <= {"torn_down", "error", "signal"}


def _rank_0_fails_then_rank_1_is_killed(ctx, marker):
    if ctx.rank == 0:
        open(marker, "w").close()
        raise ValueError("rank 0 fails first")
    deadline = time.monotonic() + 30  # a bound on the wait, not a timing assertion
    while not os.path.exists(marker) and time.monotonic() < deadline:
        time.sleep(0.005)
    time.sleep(0.1)  # rank 0's error reaches the runner first; this rank is still alive when it does
    os.kill(os.getpid(), signal.SIGKILL)


def test_a_rank_killed_just_after_a_peer_failed_is_reported_with_its_signal(tmp_path):
    # a rank killed from outside closes its sockets before it is reaped, so a peer's error can arrive first:
    # the runner lets the ranks still running end on their own before it tears them down
    outcome = Job(_rank_0_fails_then_rank_1_is_killed, 2, args=(str(tmp_path / "failed"),), timeout=60).start().wait()
    assert outcome.outcomes[0].status == "error"
    assert outcome.outcomes[1].status == "signal", outcome.outcomes[1].describe()
    assert outcome.outcomes[1].signal == signal.SIGKILL


def _sigint_rank_1(ctx):
    if ctx.rank == 1:
        os.kill(os.getpid(), signal.SIGINT)
        time.sleep(60)  # a rank that ignored it would sleep here until the test's timeout
    dist.barrier()


def test_a_rank_sent_sigint_stops_as_a_python_process_does():
    # the ranks are forked while the runner holds SIGINT in a recorder: a rank must not keep that handler
    outcome = Job(_sigint_rank_1, 2, timeout=30).start().wait()
    assert outcome.outcomes[1].status == "error" and "KeyboardInterrupt" in outcome.outcomes[1].error
    assert not outcome.timed_out


def _hang_on_rank_2(ctx):
    if ctx.rank == 2:
        time.sleep(3600)
    return ctx.rank


def test_hung_rank_is_stopped_by_the_timeout():
    start = time.monotonic()
    with pytest.raises(RankTimeout) as e:
        run_ranks(_hang_on_rank_2, 3, timeout=3)
    assert time.monotonic() - start < 600  # far below the rank's hour of sleep: the timeout ended it
    assert list(e.value.failures) == [2]


def _start_grandchild(ctx):
    import subprocess

    proc = subprocess.Popen(["sleep", "3600"])
    if ctx.rank == 0:
        raise RuntimeError(f"left {proc.pid}")
    time.sleep(3600)


def test_teardown_leaves_no_process_behind_even_grandchildren():
    outcome = Job(_start_grandchild, 2, timeout=30).start().wait()
    pid = int(outcome.outcomes[0].error.rsplit(" ", 1)[1])
    time.sleep(0.2)
    assert not psutil.pid_exists(pid) or psutil.Process(pid).status() == psutil.STATUS_ZOMBIE


def test_rank_logs_are_kept(tmp_path):
    run_ranks(_all_reduce_rank, 2, log_dir=tmp_path)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["rank0.log", "rank1.log"]


def _affinity_rank(ctx):
    return sorted(os.sched_getaffinity(0))


def test_pinned_oversubscribed_ranks_each_keep_one_cpu_round_robin():
    cpus = sorted(os.sched_getaffinity(0))
    if len(cpus) > 8:
        pytest.skip("oversubscribing this many CPUs takes too many ranks")
    world = len(cpus) + 1
    pinned = Job(_affinity_rank, world, timeout=60, pin_cpus=True).start().wait().results
    assert pinned == [[cpus[r % len(cpus)]] for r in range(world)]
    assert Job(_affinity_rank, world, timeout=60).start().wait().results == [cpus] * world


def test_bad_world_is_a_clear_error():
    with pytest.raises(ConfigError, match="world"):
        run_ranks(_all_reduce_rank, 0)


def test_errors_survive_pickling_across_processes():
    import pickle

    from resilience.errors import ConfigError, IntegrityError, InvalidCombination

    for e in (
        ConfigError("a", "b", "c"),
        IntegrityError("p", "checksum", "d"),
        RankFailure({1: "x"}, "w"),
        RankTimeout({2: "y"}, "z"),
        InvalidCombination("format", "p", "f"),
    ):
        again = pickle.loads(pickle.dumps(e))
        assert type(again) is type(e) and str(again) == str(e)


def _stop_rank_1(ctx, then: str):
    if ctx.rank == 1:
        os.kill(os.getpid(), signal.SIGSTOP)  # a hung node: nobody continues it
    elif then == "fail":
        time.sleep(1)
        raise RuntimeError("rank 0 gave up waiting")
    time.sleep(3600)


def test_a_rank_stopped_for_good_is_said_so_at_the_timeout_and_killed():
    job = Job(_stop_rank_1, 2, args=("wait",), timeout=4)
    outcome = job.start().wait()
    stopped, waiting = outcome.outcomes[1], outcome.outcomes[0]
    assert outcome.timed_out and stopped.status == "stopped" and waiting.status == "timeout"
    assert "rank 1 was stopped (SIGSTOP" in stopped.describe() and "timeout of 4 s" in stopped.describe()
    assert outcome.first_failure().rank == 1  # the stop explains the other rank's wait
    assert not any(psutil.pid_exists(pid) and psutil.Process(pid).status() != psutil.STATUS_ZOMBIE for pid in job.pids)


def test_a_rank_stopped_when_another_fails_is_not_just_torn_down():
    outcome = Job(_stop_rank_1, 2, args=("fail",), timeout=60).start().wait()
    assert outcome.outcomes[0].status == "error"
    assert outcome.outcomes[1].status == "stopped" and "when another rank failed" in outcome.outcomes[1].describe()


@pytest.mark.parametrize("timeout", [float("nan"), float("inf"), -1, 0, 3601, 1e9, "10", True])
def test_a_job_timeout_is_a_finite_positive_number_below_the_ceiling(timeout):
    from resilience.launch import MAX_JOB_TIMEOUT

    assert MAX_JOB_TIMEOUT == 3600
    with pytest.raises(ConfigError, match="timeout"):
        Job(_all_reduce_rank, 2, timeout=timeout)
    with pytest.raises(ConfigError, match="init_timeout"):
        Job(_all_reduce_rank, 2, init_timeout=timeout)


def test_a_job_used_as_a_context_tears_its_ranks_down_on_an_exception():
    with pytest.raises(KeyboardInterrupt):
        with Job(_hang_on_rank_2, 3, timeout=60) as job:
            pids = job.pids
            raise KeyboardInterrupt
    assert not any(psutil.pid_exists(pid) and psutil.Process(pid).status() != psutil.STATUS_ZOMBIE for pid in pids)
