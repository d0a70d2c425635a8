"""The seam's fault records, carried out by the file system on real writers: the errno reaches the
writer (Python or dd), short and torn writes land as described, a crash kills the writing rank's whole
process group and nothing else, and every fault that fired says so in the report."""

import errno
import os
import random
import signal
import subprocess

import pytest

from resilience.fusefs import mounted, read_log, tell

from .procs import Rank, gone

pytestmark = pytest.mark.multiprocess
CHUNK = 4096


def _chunks(conn, path, count, size=CHUNK):
    """os.write `count` chunks (each one write request); which call failed, with which errno, or None."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        for i in range(1, count + 1):
            try:
                n = os.write(fd, bytes([i]) * size)
            except OSError as e:
                return {"failed_at": i, "errno": e.errno}
            if n != size:
                return {"short_at": i, "wrote": n}
    finally:
        os.close(fd)
    return None


def _run(m, fn, *args, rank=0):
    p = Rank(fn, *args)
    m.set_ranks({rank: p.pid})
    code, msg = p.go().wait()
    assert code == 0 and msg[0] == "ok", msg
    return msg[1]


def test_enospc_on_the_kth_write_reaches_the_writer(dirs):
    backing, mnt, log = dirs
    fault = {"kind": "io_error", "errno": "ENOSPC", "rank": 0, "op": "write", "path": "*.bin", "nth": 3}
    with mounted(backing, mnt, log=log, faults=[fault]) as m:
        assert _run(m, _chunks, str(mnt / "a.bin"), 5) == {"failed_at": 3, "errno": errno.ENOSPC}
        assert _run(m, _chunks, str(mnt / "b.bin"), 5) is None  # fired once: the third write only
        fired = m.firings()
    assert (backing / "a.bin").read_bytes() == b"\x01" * CHUNK + b"\x02" * CHUNK
    assert [(f["action"], f["rank"], f["via"], os.path.basename(f["path"])) for f in fired] == [
        ("raise ENOSPC", 0, "fuse", "a.bin")
    ]
    failed = [r for r in read_log(log) if r.get("errno")]
    assert [(r["op"], r["errno"], r["offset"]) for r in failed] == [("write", "ENOSPC", 2 * CHUNK)]


def _dd(conn, path):
    p = subprocess.run(["dd", "if=/dev/zero", f"of={path}", f"bs={CHUNK}", "count=8"], capture_output=True, text=True)
    return {"code": p.returncode, "stderr": p.stderr}


def test_a_writer_that_is_not_python_gets_the_errno(dirs):
    backing, mnt, log = dirs
    fault = {"kind": "io_error", "errno": "EDQUOT", "rank": 0, "op": "write", "nth": 2}
    with mounted(backing, mnt, log=log, faults=[fault]) as m:
        out = _run(m, _dd, str(mnt / "dd.bin"))
    assert out["code"] != 0 and os.strerror(errno.EDQUOT) in out["stderr"]
    assert os.path.getsize(backing / "dd.bin") == CHUNK


def _do(conn, mnt, op):
    try:
        if op == "read":
            open(f"{mnt}/exists", "rb").close()
        elif op == "rename":
            os.rename(f"{mnt}/exists", f"{mnt}/renamed")
        elif op == "mkdir":
            os.mkdir(f"{mnt}/folder")
        elif op == "fsync":
            with open(f"{mnt}/exists", "r+b") as f:
                os.fsync(f.fileno())
        elif op == "close":
            f = open(f"{mnt}/exists", "rb")
            f.close()
    except OSError as e:
        return e.errno
    return None


@pytest.mark.parametrize(
    "op, name", [("read", "EIO"), ("rename", "EROFS"), ("mkdir", "EDQUOT"), ("fsync", "EIO"), ("close", "ENOSPC")]
)
def test_an_errno_on_each_operation(dirs, op, name):
    backing, mnt, log = dirs
    (backing / "exists").write_bytes(b"x")
    with mounted(backing, mnt, log=log, faults=[{"kind": "io_error", "errno": name, "op": op}]) as m:
        assert _run(m, _do, str(mnt), op) == getattr(errno, name)
    assert sorted(os.listdir(backing)) == ["exists"]  # nothing renamed, no folder made


def test_faults_reach_only_the_ranks_and_paths_they_target_counted_per_rank(dirs):
    backing, mnt, log = dirs
    fault = {"kind": "io_error", "errno": "EIO", "rank": [1, 2, 3], "op": "write", "path": "*.bin", "nth": 2}
    with mounted(backing, mnt, log=log, faults=[fault]) as m:
        ranks = {
            r: Rank(_chunks, str(mnt / f"r{r}.{ext}"), 3) for r, ext in ((0, "bin"), (1, "txt"), (2, "bin"), (3, "bin"))
        }
        m.set_ranks({r: p.pid for r, p in ranks.items()})
        out = {r: p.go().wait()[1][1] for r, p in ranks.items()}
        _chunks(None, str(mnt / "outside.bin"), 3)  # no rank: never faulted
    assert out == {0: None, 1: None, 2: {"failed_at": 2, "errno": errno.EIO}, 3: {"failed_at": 2, "errno": errno.EIO}}
    assert os.path.getsize(backing / "outside.bin") == 3 * CHUNK


def test_short_torn_and_slow_writes(dirs):
    backing, mnt, log = dirs
    faults = [
        {"kind": "short_write", "path": "short", "nth": 2, "keep": 100},
        {"kind": "torn_write", "path": "torn", "nth": 1, "keep": 1000},
        {"kind": "torn_write", "path": "noise", "nth": 1, "keep": 10, "fill": "garbage", "seed": 7},
        {"kind": "slow_write", "path": "slow", "delay": 0.01, "times": 2},
    ]
    with mounted(backing, mnt, log=log, faults=faults) as m:
        out = {name: _run(m, _chunks, str(mnt / name), 2) for name in ("short", "torn", "noise", "slow")}
        fired = m.firings()
    assert out == {"short": {"short_at": 2, "wrote": 100}, "torn": None, "noise": None, "slow": None}
    assert (backing / "short").read_bytes() == b"\x01" * CHUNK + b"\x02" * 100
    assert (backing / "torn").read_bytes() == b"\x01" * 1000 + bytes(CHUNK - 1000) + b"\x02" * CHUNK
    assert (backing / "noise").read_bytes()[:CHUNK] == b"\x01" * 10 + random.Random(7).randbytes(CHUNK - 10)
    assert (backing / "slow").read_bytes() == b"\x01" * CHUNK + b"\x02" * CHUNK
    assert sorted(f["action"] for f in fired) == ["short", "slow", "torn", "torn"]


AT = 100_000


def _forked_writer(conn, path):
    """The rank forks a writer child (as megatron-core's async writers are) and waits for it."""
    start_r, start_w = os.pipe()
    child = os.fork()
    if child == 0:
        os.read(start_r, 1)  # not before the rank has said who its child is: the crash kills both
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        for _ in range(64):
            os.write(fd, b"w" * 65536)
        os._exit(0)
    conn.send(("child", child))
    os.write(start_w, b"g")
    os.waitpid(child, 0)
    return "survived"


def _idle(conn, mnt):
    conn.recv()  # until the test says so, then prove the mount still serves this rank
    with open(f"{mnt}/after", "wb") as f:
        f.write(b"fine")
    return "done"


def test_a_crash_after_n_bytes_kills_the_writing_ranks_process_group(dirs):
    backing, mnt, log = dirs
    fault = {"kind": "rank_crash", "rank": 0, "path": "*.pt", "at_byte": AT}
    with mounted(backing, mnt, log=log, faults=[fault]) as m:
        writer, other = Rank(_forked_writer, str(mnt / "shard.pt")), Rank(_idle, str(mnt))
        m.set_ranks({0: writer.pid, 1: other.pid})
        writer.go()
        other.go()
        child = writer.recv()[1]
        code, _ = writer.wait()
        assert code == -signal.SIGKILL and gone(child)
        other._conn.send("go on")
        assert other.wait() == (0, ("ok", "done"))  # another rank's group is untouched
        fired = m.firings()
    assert os.path.getsize(backing / "shard.pt") == AT  # exactly the bytes before the crash point
    assert [(f["action"], f["rank"], f["pid"], f["bytes"]) for f in fired] == [("sigkill", 0, child, AT)]
    assert (backing / "after").read_bytes() == b"fine"
    crash = [r for r in read_log(log) if r["op"] == "sigkill"]
    assert len(crash) == 1 and crash[0]["rank"] == 0


def _sync_then_rename(conn, mnt):
    with open(f"{mnt}/tmp.pt", "wb") as f:
        f.write(b"data")
        f.flush()
        os.fsync(f.fileno())
    os.rename(f"{mnt}/tmp.pt", f"{mnt}/final.pt")
    return "not killed"


@pytest.mark.parametrize(
    "op, when, left",
    [
        ("fsync", "before", ["tmp.pt"]),
        ("fsync", "after", ["tmp.pt"]),
        ("rename", "before", ["tmp.pt"]),
        ("rename", "after", ["final.pt"]),
    ],
)
def test_a_crash_before_or_after_an_operation(dirs, op, when, left):
    backing, mnt, log = dirs
    fault = {"kind": "rank_crash", "op": op, "when": when, "path": "tmp.pt"}
    with mounted(backing, mnt, log=log, faults=[fault]) as m:
        p = Rank(_sync_then_rename, str(mnt))
        m.set_ranks({0: p.pid})
        assert p.go().wait()[0] == -signal.SIGKILL
        fired = m.firings()
    assert sorted(os.listdir(backing)) == left
    assert [(f["action"], f["op"], f["when"]) for f in fired] == [("sigkill", op, when)]
    synced = [r for r in read_log(log) if r["op"] == "fsync"]
    assert len(synced) == (0 if (op, when) == ("fsync", "before") else 1)


def test_a_rank_in_the_runners_process_group_is_killed_as_a_tree(dirs):
    """A rank that did not make its own group (a plain subprocess) shares this test's group: the crash
    kills the rank and what it started, never the group, which holds this process."""
    backing, mnt, log = dirs
    fault = {"kind": "rank_crash", "rank": 0, "at_byte": 2 * CHUNK}
    script = f"read go; exec dd if=/dev/zero of={mnt}/x bs={CHUNK} count=16 status=none"
    with mounted(backing, mnt, log=log, faults=[fault]) as m:
        sh = subprocess.Popen(["sh", "-c", script], stdin=subprocess.PIPE)
        assert os.getpgid(sh.pid) == os.getpgid(0)
        m.set_ranks({0: sh.pid})
        sh.communicate(b"go\n", timeout=60)
        assert sh.returncode == -signal.SIGKILL
    assert os.path.getsize(backing / "x") == 2 * CHUNK


def test_a_crash_never_kills_the_runner(dirs):
    """A rank map that names the runner itself as a rank: the crash fires, and spares the runner."""
    backing, mnt, log = dirs
    fault = {"kind": "rank_crash", "rank": 0, "at_byte": CHUNK}
    with mounted(backing, mnt, log=log, faults=[fault], ranks={0: os.getpid()}) as m:
        _chunks(None, str(mnt / "x"), 2)
        fired = m.firings()
    assert [(f["action"], f["pid"]) for f in fired] == [("sigkill", os.getpid())]


def _told_then_chunks(conn, mnt, rank, arm, path, count):
    """Announce itself as `rank`, write `count` chunks, announce operation `arm`, write `count` more."""
    tell(str(mnt), "rank", rank)
    first = _chunks(conn, path + ".0", count)
    tell(str(mnt), "arm", arm)
    return first, _chunks(conn, path + ".1", count)


def test_a_rank_that_announces_itself_arms_its_records_at_an_operation(dirs):
    """No rank map from the runner: the rank tells the file system who it is, and a record armed at its
    operation 2 counts only the writes after that, as the seam arms it in process."""
    backing, mnt, log = dirs
    fault = {"kind": "io_error", "errno": "EIO", "rank": 1, "op": "write", "nth": 2}
    with mounted(backing, mnt, log=log, faults=[fault], arm_at=[2], paths_as=backing) as m:
        p = Rank(_told_then_chunks, str(mnt), 1, 2, str(mnt / "a.bin"), 3)
        code, msg = p.go().wait()
        fired = m.firings()
    assert code == 0 and msg[1] == (None, {"failed_at": 2, "errno": errno.EIO}), msg
    assert [(f["rank"], f["path"]) for f in fired] == [(1, str(backing / "a.bin.1"))]  # named as the backing
    assert all(r["rank"] == 1 for r in read_log(log))


def test_a_record_armed_later_never_fires_before(dirs):
    backing, mnt, log = dirs
    fault = {"kind": "io_error", "errno": "EIO", "rank": 0, "op": "write", "nth": 1}
    with mounted(backing, mnt, log=log, faults=[fault], arm_at=[5]) as m:
        p = Rank(_told_then_chunks, str(mnt), 0, 4, str(mnt / "b.bin"), 2)
        code, msg = p.go().wait()
        assert m.firings() == []
    assert code == 0 and msg[1] == (None, None), msg
