"""No rank outlives its runner, however the runner ends; nor does anything a rank started."""

import glob
import json
import os
import signal
import subprocess
import sys
import time

import psutil
import pytest

from tests.temp_folders import left_in, private_temp

pytestmark = pytest.mark.multiprocess

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SCRIPT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "runner_script.py")
STARTUP = 120.0  # seconds for a runner to import torch and start its ranks on a loaded machine
GONE = 10.0  # seconds for the kernel and the guards to end every process once the runner is gone


def _env():
    return dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))


def _wait_for(predicate, bound: float, what: str, proc: subprocess.Popen | None = None):
    end = time.monotonic() + bound
    while time.monotonic() < end:
        got = predicate()
        if got:
            return got
        if proc is not None and proc.poll() is not None:
            pytest.fail(f"the runner exited ({proc.returncode}) before {what}: {_output(proc)}")
        time.sleep(0.1)
    pytest.fail(f"not within {bound:g} s: {what}")


def _output(proc: subprocess.Popen) -> str:
    if proc.poll() is None:
        proc.kill()
    out, _ = proc.communicate(timeout=30)
    return (out or b"").decode(errors="replace")[-3000:]


def _processes(pids):
    """Each pid as a psutil.Process (its start time pins it: a reused pid is not mistaken for it)."""
    out = []
    for pid in pids:
        try:
            out.append(psutil.Process(pid))
        except psutil.NoSuchProcess:
            pass
    return out


def _running(procs):
    running = []
    for p in procs:
        try:
            if p.is_running() and p.status() != psutil.STATUS_ZOMBIE:
                running.append(p)
        except psutil.NoSuchProcess:
            pass
    return running


def _assert_all_end(procs):
    end = time.monotonic() + GONE
    while _running(procs) and time.monotonic() < end:
        time.sleep(0.1)
    left = _running(procs)
    for p in left:  # never leave them to the next test
        try:
            p.kill()
        except psutil.NoSuchProcess:
            pass
    assert not left, f"outlived the runner: {[(p.pid, p.cmdline()[:3]) for p in left]}"


def _recorded(out) -> list[int] | None:
    names = (
        [n for n in os.listdir(os.path.join(out, "pids")) if not n.startswith(".")]
        if os.path.isdir(os.path.join(out, "pids"))
        else []
    )
    if len(names) < 6:  # two ranks, each with a forked child and a subprocess
        return None
    return [int(open(os.path.join(out, "pids", n)).read()) for n in names]


def _start_runner(out, start_method, *extra, temp=None):
    return subprocess.Popen(
        [sys.executable, SCRIPT, str(out), start_method, *extra],
        env=dict(_env(), TMPDIR=temp) if temp else _env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
    )


def _assert_temp_emptied(temp):
    """Nothing left in the runner's temp folder: the job's folder, with what its ranks made there, is gone."""
    end = time.monotonic() + GONE
    while left_in(temp) and time.monotonic() < end:
        time.sleep(0.1)
    assert left_in(temp) == []


@pytest.mark.parametrize("start_method", ["fork", pytest.param("spawn", marks=pytest.mark.slow)])
def test_a_sigkilled_runner_leaves_no_rank_nor_any_child_of_a_rank(tmp_path, start_method):
    with private_temp() as temp:
        runner = _start_runner(tmp_path, start_method, temp=temp)
        procs = _processes(_wait_for(lambda: _recorded(tmp_path), STARTUP, "the ranks started", runner))
        assert len(procs) == 6
        assert any(name.startswith("pymp-") for name in "/".join(left_in(temp)).split("/")), left_in(temp)
        runner.kill()
        runner.wait(timeout=30)
        _assert_all_end(procs)
        _assert_temp_emptied(temp)  # no teardown ran: the job folder's reaper removed it


@pytest.mark.parametrize("sig, caught", [(signal.SIGTERM, "Interrupted"), (signal.SIGINT, "KeyboardInterrupt")])
def test_sigterm_and_sigint_tear_every_rank_down_before_the_runner_exits(tmp_path, sig, caught):
    with private_temp() as temp:
        runner = _start_runner(tmp_path, "fork", "handle", temp=temp)
        procs = _processes(_wait_for(lambda: _recorded(tmp_path), STARTUP, "the ranks started", runner))
        runner.send_signal(sig)
        try:
            runner.wait(timeout=60)
        except subprocess.TimeoutExpired:
            pytest.fail(f"the runner did not end on {sig.name}: {_output(runner)}")
        assert runner.returncode == 3, _output(runner)
        after = json.loads((tmp_path / "after.json").read_text())
        assert after == {"caught": caught, "alive": []}  # the runner's own teardown ended them all
        _assert_all_end(procs)
        assert left_in(temp) == []  # and removed their temp files


SLOW_SAVE = """
name: slow-save
topology: tp2pp1dp1
combinations: [GLOBAL/torch_dist/sync]
timeout: 300
steps:
  - train: 1
  - fault: {kind: slow_write, delay: 0.5, times: 1000}
  - save
"""


@pytest.mark.parametrize("sig", [signal.SIGKILL, pytest.param(signal.SIGTERM, marks=pytest.mark.slow)])
def test_resilience_run_killed_mid_save_leaves_no_rank(tmp_path, sig):
    scenario = tmp_path / "slow.yaml"
    scenario.write_text(SLOW_SAVE)
    out = tmp_path / "runs"
    cli = subprocess.Popen(
        [sys.executable, "-m", "resilience.cli", "run", str(scenario), "--out", str(out)],
        env=_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
    )

    def saving():
        written = [
            f
            for root in glob.glob(str(out / "*" / "cases" / "*" / "ckpt"))
            for _, _, files in os.walk(root)
            for f in files
        ]  # the save's staging folder is hidden
        kids = psutil.Process(cli.pid).children(recursive=True) if cli.poll() is None else []
        return kids if written and len(kids) >= 2 else None

    kids = _wait_for(saving, STARTUP, "the save started writing", cli)
    cli.send_signal(sig)
    try:
        cli.wait(timeout=60)
    except subprocess.TimeoutExpired:
        pytest.fail(f"resilience run did not end on {sig.name}: {_output(cli)}")
    if sig == signal.SIGTERM:
        assert cli.returncode == 128 + signal.SIGTERM, _output(cli)
        assert "interrupted by SIGTERM" in _output(cli)
    _assert_all_end(kids)


STARTS_A_SLEEPER = """
import subprocess, sys, time
from resilience.launch.lifetime import argv_dying_with_parent
sleeper = subprocess.Popen(argv_dying_with_parent(["sleep", "3600"]), start_new_session=True)
print(sleeper.pid, flush=True)
time.sleep(3600)
"""


def test_a_command_started_to_die_with_its_parent_does_even_in_its_own_session():
    """As `validate --local` starts each torchrun agent: the agent ends with a SIGKILLed runner."""
    runner = subprocess.Popen([sys.executable, "-c", STARTS_A_SLEEPER], env=_env(), stdout=subprocess.PIPE)
    try:
        line = runner.stdout.readline()
        assert line.strip().isdigit(), _output(runner)
        sleeper = _processes([int(line)])
        # the wrapper execs the command: the same process becomes `sleep`
        _wait_for(lambda: _running(sleeper) and sleeper[0].name() == "sleep", STARTUP, "sleep started", runner)
    finally:
        runner.kill()
        runner.wait(timeout=30)
        runner.stdout.close()
    _assert_all_end(sleeper)


@pytest.mark.parametrize("spawned", [True, False], ids=["spawned guard", "forked guard"])
@pytest.mark.parametrize("leader_waits", [True, False], ids=["leader lives on", "leader gone at once"])
def test_a_group_ends_with_its_leader_whenever_the_leader_ends(monkeypatch, spawned, leader_waits):
    """The guard kills what the leader started once the leader ends, also when the leader ends before the
    guard is ready to hear of it (then it finds another parent and acts at once)."""
    from resilience.launch import lifetime

    if not spawned:
        monkeypatch.setattr(lifetime, "_SPAWNED_GUARD", (None, None))
    read, write = os.pipe()
    leader = os.fork()
    if leader == 0:  # the leader: own group, a guard, a long-running child; then it ends
        try:
            os.close(read)
            os.setpgid(0, 0)
            guard = lifetime.guard_process_group("test-guard")
            child = subprocess.Popen(["sleep", "60"]).pid
            os.write(write, json.dumps([guard, child]).encode())
            if leader_waits:
                time.sleep(1.0)  # the guard is surely waiting by now
        finally:
            os._exit(0)
    os.close(write)
    with os.fdopen(read) as f:
        guard, child = json.loads(f.read())
    os.waitpid(leader, 0)
    _assert_all_end(_processes([guard, child]))  # (already gone ones are not found)
