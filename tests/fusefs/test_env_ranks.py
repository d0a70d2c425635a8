"""A mount that reads ranks from the callers' environment (rank_env="RANK", as torchrun sets it): a worker,
its threads, the children it forks and the programs it runs count as its rank with no rank map at all;
a process without RANK (the agent, this test) is no rank's; a crash aimed at rank 1 kills that worker."""

import os
import subprocess
import sys
import textwrap

import pytest

from resilience.fusefs import mounted, read_log

pytestmark = pytest.mark.multiprocess

WORKER = textwrap.dedent(
    """
    import os, subprocess, sys, threading
    mnt, rank = sys.argv[1], os.environ["RANK"]
    open(f"{mnt}/r{rank}-self", "wb").write(b"s")
    t = threading.Thread(target=lambda: open(f"{mnt}/r{rank}-thread", "wb").write(b"t"))
    t.start(); t.join()
    child = os.fork()
    if child == 0:
        open(f"{mnt}/r{rank}-child", "wb").write(b"c")
        os._exit(0)
    os.waitpid(child, 0)
    subprocess.run(["dd", "if=/dev/zero", f"of={mnt}/r{rank}-dd", "bs=4096", "count=1", "status=none"], check=True)
    with open(f"{mnt}/r{rank}-big", "wb") as f:
        for _ in range(8):
            f.write(b"x" * 4096); f.flush()
    """
)


def _agent(mnt, ranks=(0, 1)):
    """What torchrun does: one worker per rank, each in a session of its own, RANK in its environment."""
    workers = [
        subprocess.Popen(
            [sys.executable, "-c", WORKER, str(mnt)], env={**os.environ, "RANK": str(r)}, start_new_session=True
        )
        for r in ranks
    ]
    return [w.wait(timeout=60) for w in workers]


def test_workers_are_ranked_by_their_environment(dirs):
    backing, mnt, log = dirs
    with mounted(backing, mnt, log=log, rank_env="RANK"):
        assert _agent(mnt) == [0, 0]
        (mnt / "outside").write_bytes(b"o")
    creates = {os.path.basename(r["path"]): r for r in read_log(log) if r["op"] == "create"}
    for rank in (0, 1):
        for name in ("self", "thread", "child", "dd", "big"):
            assert creates[f"r{rank}-{name}"]["rank"] == rank, name
    assert creates["outside"]["rank"] is None


def test_a_crash_aimed_at_rank_1_kills_that_worker_only(dirs):
    backing, mnt, log = dirs
    crash = {"kind": "rank_crash", "target": {"rank": 1, "path": "*r1-big"}, "trigger": {"at_byte": 8192}}
    with mounted(backing, mnt, log=log, rank_env="RANK", faults=[crash]) as m:
        codes = _agent(mnt)
        fired = m.firings()
    assert codes[0] == 0 and codes[1] == -9
    assert [f["rank"] for f in fired] == [1]
    assert (backing / "r1-big").stat().st_size == 8192 and (backing / "r0-big").stat().st_size == 8 * 4096
