"""Every request is attributed to the rank whose process tree holds the caller: the rank itself, a
thread of it, a child it forked, a `dd` it ran; a process outside every rank has none."""

import os
import subprocess
import threading

import pytest

from resilience.fusefs import mounted, read_log

from .procs import Rank

pytestmark = pytest.mark.multiprocess


def _writers(conn, mnt, rank):
    """The rank writes a file itself, from a thread, from a forked child and through dd."""
    with open(f"{mnt}/r{rank}-self", "wb") as f:
        f.write(b"s")
    t = threading.Thread(target=lambda: open(f"{mnt}/r{rank}-thread", "wb").write(b"t"))
    t.start()
    t.join()
    child = os.fork()
    if child == 0:
        try:
            with open(f"{mnt}/r{rank}-child", "wb") as f:
                f.write(b"c")
        finally:
            os._exit(0)
    os.waitpid(child, 0)
    dd = subprocess.run(["dd", "if=/dev/zero", f"of={mnt}/r{rank}-dd", "bs=4096", "count=2", "status=none"])
    assert dd.returncode == 0
    return {"child": child, "thread": t.native_id}


def test_each_writer_counts_as_its_ranks(dirs):
    backing, mnt, log = dirs
    with mounted(backing, mnt, log=log) as m:
        ranks = [Rank(_writers, str(mnt), r) for r in range(2)]
        m.set_ranks({r: p.pid for r, p in enumerate(ranks)})
        results = []
        for p in ranks:
            p.go()
        for p in ranks:
            code, msg = p.wait()
            assert code == 0, msg
            results.append(msg[1])
        (mnt / "outside").write_bytes(b"o")  # this test's process is no rank's
    creates = {os.path.basename(r["path"]): r for r in read_log(log) if r["op"] == "create"}
    for rank, res in enumerate(results):
        who = {
            name: (creates[f"r{rank}-{name}"]["rank"], creates[f"r{rank}-{name}"]["pid"])
            for name in ("self", "thread", "child", "dd")
        }
        assert who["self"] == (rank, ranks[rank].pid) and who["thread"] == (rank, ranks[rank].pid)
        assert who["child"] == (rank, res["child"])
        assert who["dd"][0] == rank and who["dd"][1] not in (ranks[rank].pid, res["child"])
        t = creates[f"r{rank}-thread"]
        assert t["thread"] == "writer" and t["tid"] == res["thread"]
        assert {r["rank"] for r in read_log(log) if os.path.basename(r["path"]) == f"r{rank}-dd"} == {rank}
    assert creates["outside"]["rank"] is None and creates["outside"]["pid"] == os.getpid()


def test_a_new_rank_map_is_in_force_once_set(dirs):
    """The same process is rank 0, then rank 5: set_ranks returns only once the mount attributes by it."""
    backing, mnt, log = dirs
    with mounted(backing, mnt, log=log, ranks={0: os.getpid()}) as m:
        (mnt / "first").write_bytes(b"1")
        m.set_ranks({5: os.getpid()})
        (mnt / "second").write_bytes(b"2")
        m.set_ranks({})
        (mnt / "third").write_bytes(b"3")
    ranks = {os.path.basename(r["path"]): r["rank"] for r in read_log(log) if r["op"] == "create"}
    assert ranks == {"first": 0, "second": 5, "third": None}


def _exec_with_a_file_open(conn, mnt):
    """os.system's child closes the rank's close-on-exec descriptors inside its exec, a file of the mount
    among them: the file system must attribute that flush without reading what the exec holds shut
    (/proc/<pid>/stat), or the child, the rank and the file system wait on each other for good."""
    with open(f"{mnt}/held", "wb") as f:
        f.write(b"h")
        status = os.system(f"echo ran >> {mnt}/marker")
    return status


def test_an_exec_that_closes_a_file_of_the_mount_does_not_wait_on_the_file_system(dirs):
    backing, mnt, log = dirs
    with mounted(backing, mnt, log=log) as m:
        rank = Rank(_exec_with_a_file_open, str(mnt))
        m.set_ranks({0: rank.pid})
        code, msg = rank.go().wait(30)
        if code is None:  # the hang: end it by aborting the connection, so the test fails instead of hanging
            m.abort()
    assert code == 0 and msg == ("ok", 0), "os.system with a file of the mount open never returned"
    assert (backing / "marker").read_text() == "ran\n"
    flushes = [r for r in read_log(log) if r["op"] == "flush" and r["pid"] != rank.pid]
    assert flushes and {r["rank"] for r in flushes} == {0}, "the child's flush is not logged as the rank's"
