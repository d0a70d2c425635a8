"""The external nemesis kills or stops rank processes from outside, on observed progress or on time;
afterwards the reference resumes from the newest durable valid checkpoint."""

import os
import time

import psutil
import pytest

from resilience.errors import ConfigError
from resilience.faults import Nemesis, fault_from_dict, faults_from, kill_ranks, open_positions, unprobed

from .ranks import (
    ALL,
    combos,
    died_by_sigkill,
    is_local,
    load_all,
    newest_durable,
    save_forever,
    staging_glob,
    start_job,
)

pytestmark = pytest.mark.multiprocess

WATCH = 20000  # bytes of rank 1's shard of iteration 3


@pytest.mark.parametrize("combo", combos(*ALL))
def test_kill_a_rank_when_its_shard_reaches_an_offset(tmp_path, combo):
    root = tmp_path / "ckpt"
    # iterations 1 and 2 commit; rank 1 writes its shard of iteration 3 slowly, so there is time to watch
    watched = staging_glob(combo, 1, 3)
    job = start_job(
        save_forever, combo, str(root), [{"kind": "slow_write", "rank": 1, "delay": 0.002, "path": watched}], until=6
    )
    fault = fault_from_dict({"kind": "rank_kill", "rank": 1, "path": watched, "size": WATCH})
    with Nemesis(job, [fault], folder=root) as nemesis:
        outcome = job.wait()
    [fired] = nemesis.firings()
    assert died_by_sigkill(outcome, 1), outcome.outcomes[1].describe()
    assert fired["action"] == "signal SIGKILL" and fired["ranks"] == [1] and fired["bytes"] >= WATCH
    assert fired["observed"] in ("size", "fdinfo") and ".staging-iter_0000003-" in fired["file"]
    # the job is torn down, as torchrun does (a local save has no collective: rank 0 may have finished)
    assert outcome.outcomes[0].status in ("torn_down", "error", "signal") + (("ok",) if is_local(combo) else ())
    assert newest_durable(combo, root) == 2
    [got] = load_all(combo, [root])
    assert got["iteration"] == 2 and got["fingerprint_ok"], got


@pytest.mark.parametrize("combo", combos("LEGACY/torch/sync", "GLOBAL/torch_dist/async"))
def test_preemption_kills_every_rank_at_a_time(tmp_path, combo):
    root = tmp_path / "ckpt"
    job = start_job(save_forever, combo, str(root))
    # at least 0.5 s in, and once a first checkpoint is committed (its tracker exists)
    preempt = fault_from_dict(
        {"kind": "rank_kill", "after": 0.5, "path": "latest_checkpointed_iteration.txt", "size": 1}
    )
    with Nemesis(job, [preempt], folder=root) as nemesis:
        outcome = job.wait()
    [fired] = nemesis.firings()
    assert fired["action"] == "preempt" and fired["ranks"] == [0, 1] and fired["elapsed"] >= 0.5
    assert sorted(fired["reached"]) == sorted(job.pids)
    # the job notices the first death and counts the rest as torn down
    assert any(died_by_sigkill(outcome, r) for r in (0, 1)), outcome.failures
    assert {o.status for o in outcome.outcomes} <= {"signal", "torn_down"}, outcome.failures
    newest = newest_durable(combo, root)
    assert newest is not None and newest >= 1
    [got] = load_all(combo, [root])
    assert got["iteration"] == newest and got["fingerprint_ok"], got


def test_a_stopped_rank_resumes_and_the_job_finishes(tmp_path):
    root = tmp_path / "ckpt"
    job = start_job(save_forever, "LEGACY/torch/sync", str(root), until=12)
    # once the first checkpoint is committed, stop rank 1 for half a second
    hang = fault_from_dict(
        {"kind": "rank_hang", "rank": 1, "path": "latest_checkpointed_iteration.txt", "size": 1, "resume_after": 0.5}
    )
    with Nemesis(job, [hang], folder=root) as nemesis:
        outcome = job.wait()
    assert outcome.ok, outcome.failures
    [fired] = nemesis.firings()
    assert fired["action"] == "stop" and outcome.seconds >= fired["elapsed"] + 0.5
    assert outcome.results == [12, 12]


def test_a_hung_rank_is_stopped_by_the_job_timeout(tmp_path):
    job = start_job(save_forever, "LEGACY/torch/sync", str(tmp_path / "ckpt"), timeout=2.0)
    with Nemesis(job, faults_from([{"kind": "rank_hang", "rank": 1, "after": 0.3}])) as nemesis:
        outcome = job.wait()
    assert nemesis.firings()[0]["action"] == "stop"
    assert outcome.timed_out and outcome.outcomes[1].status == "stopped"  # said as such, not a mere timeout
    # and no process is left behind (checked by the autouse fixture), stopped or not


def test_a_trigger_that_never_comes_leaves_the_fault_unprobed(tmp_path):
    faults = faults_from([{"kind": "rank_kill", "rank": 0, "path": "*.never", "size": 1}])
    job = start_job(save_forever, "LEGACY/torch/sync", str(tmp_path / "ckpt"), until=3)
    with Nemesis(job, faults, folder=tmp_path) as nemesis:
        outcome = job.wait()
    assert outcome.ok and nemesis.firings() == [] and unprobed(faults, nemesis.firings()) == faults


def test_size_trigger_needs_a_folder_and_world_bounds_are_checked(tmp_path):
    job = start_job(save_forever, "LEGACY/torch/sync", str(tmp_path / "ckpt"), until=1)
    try:
        with pytest.raises(ConfigError, match="folder"):
            Nemesis(job, faults_from([{"kind": "rank_kill", "path": "*.pt", "size": 1}]))
        with pytest.raises(ConfigError, match="out of range"):
            Nemesis(job, faults_from([{"kind": "rank_kill", "rank": 2, "after": 0}]))
    finally:
        assert job.wait().ok


def hold_open(ctx, folder: str, size: int, offset: int):
    """Write `size` bytes to a file of this rank, seek back to `offset` and wait there, file open, until killed."""
    with open(os.path.join(folder, f"rank{ctx.rank}.bin"), "wb", buffering=0) as f:
        f.write(b"x" * size)
        f.seek(offset + ctx.rank)
        open(os.path.join(folder, f"ready{ctx.rank}"), "w").close()
        time.sleep(60)


def test_kill_ranks_and_open_positions(tmp_path):
    with start_job(hold_open, str(tmp_path), 5000, 1234, timeout=30) as job:
        deadline = time.monotonic() + 30  # a bound on the wait, not a timing assertion
        while not all((tmp_path / f"ready{r}").exists() for r in (0, 1)) and time.monotonic() < deadline:
            time.sleep(0.01)
        for r in (0, 1):
            # the write position of the open file, not its size
            assert open_positions(job.pids[r]).get(str(tmp_path / f"rank{r}.bin")) == 1234 + r
        pid = job.pids[0]
        assert kill_ranks(job, [0]) == [pid]
        outcome = job.wait()
    assert died_by_sigkill(outcome, 0), outcome.outcomes[0].describe()
    assert outcome.outcomes[1].status == "torn_down", outcome.outcomes[1].describe()
    assert not psutil.pid_exists(pid)  # reaped: dead, not a zombie
    assert open_positions(pid) == {} and kill_ranks(job, [0]) == []


def test_a_writer_kill_names_a_rank_that_writes_its_files_itself(tmp_path):
    """The reference's async writer is a thread of the rank: the rank holds the file, no process below it
    does, so the kill does not apply (N/A with the reason). A kill whose file never appears is unprobed."""
    root = tmp_path / "ckpt"
    # time to look, on a loaded machine too: the nemesis must see the rank holding the file at least once
    slow = [{"kind": "slow_write", "rank": 1, "delay": 0.05, "times": 40, "path": "*.distcp"}]
    faults = faults_from(
        [{"kind": "writer_kill", "rank": 1, "path": "*.distcp"}, {"kind": "writer_kill", "path": "*.never"}]
    )
    job = start_job(save_forever, "GLOBAL/torch_dist/async", str(root), slow, until=3)
    with Nemesis(job, faults, folder=root) as nemesis:
        outcome = job.wait()
    assert outcome.ok, outcome.failures
    assert nemesis.firings() == [] and unprobed(faults, nemesis.firings()) == faults
    [(fault, why)] = nemesis.not_applicable()
    assert fault is faults[0] and why.startswith("rank 1 wrote ") and ".distcp itself" in why
    assert "the writer is a thread of the rank; nothing to kill alone" in why


def test_a_writer_kill_needs_the_folder(tmp_path):
    job = start_job(save_forever, "LEGACY/torch/sync", str(tmp_path / "ckpt"), until=1)
    try:
        with pytest.raises(ConfigError, match="checkpoint files it holds"):
            Nemesis(job, faults_from([{"kind": "writer_kill"}]))
    finally:
        assert job.wait().ok
