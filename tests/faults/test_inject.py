"""The injector in one process: each fault fires at exactly the configured operation, byte or phase.
(A crash here calls a stand-in for SIGKILL; the multi-rank tests use the real one.)"""

import errno
import threading
import time

import pytest

from resilience import storage
from resilience.errors import ConfigError
from resilience.faults import FaultyFileSystem, faults_from, inject, read_firings, read_ops, unprobed
from resilience.storage import LocalFileSystem
from resilience.vocab import phases


class Crashed(BaseException):
    """Stands in for the SIGKILL: not an Exception, so code under test cannot swallow it."""


def crash():
    raise Crashed()


def write_file(path, chunks, sync=True):
    with storage.current().open_write(str(path), sync=sync) as f:
        for c in chunks:
            assert f.write(c) == len(c)


@pytest.mark.parametrize(
    "name, op, code",
    [
        ("ENOSPC", "write", errno.ENOSPC),
        ("EIO", "fsync", errno.EIO),
        ("EDQUOT", "create", errno.EDQUOT),
        ("EROFS", "rename", errno.EROFS),
    ],
)
def test_errno_on_the_kth_matching_operation(tmp_path, name, op, code):
    spec = faults_from([{"kind": "io_error", "errno": name, "op": op, "path": "*b.bin", "nth": 2}])
    with inject(spec, rank=0, report=tmp_path / "r.jsonl") as fs:
        for i in range(3):
            write_file(tmp_path / f"a{i}.bin", [b"x"] * 3)  # never matches the glob
        write_file(tmp_path / "b.bin", [b"12"])  # one operation of each kind per round
        storage.current().rename(str(tmp_path / "b.bin"), str(tmp_path / "c.bin"))
        with pytest.raises(OSError) as e:
            write_file(tmp_path / "b.bin", [b"34"])
            storage.current().rename(str(tmp_path / "b.bin"), str(tmp_path / "d.bin"))
    assert e.value.errno == code and "injected" in str(e.value)
    [fired] = read_firings(tmp_path / "r.jsonl")
    assert fired["action"] == f"raise {name}" and fired["op"] == op and fired["path"].endswith("b.bin")
    assert fs.firings() == [fired]


def test_rank_filter(tmp_path):
    spec = faults_from([{"kind": "io_error", "errno": "EIO", "rank": 1}])
    with inject(spec, rank=0, world=2) as fs:
        write_file(tmp_path / "a", [b"x"])
    assert fs.faults == [] and fs.firings() == []
    with pytest.raises(ConfigError, match="out of range"):
        with inject(spec, rank=0, world=1):
            pass


def test_short_write_returns_the_short_count(tmp_path):
    with inject(faults_from([{"kind": "short_write", "keep": 3, "nth": 2}]), rank=0) as fs:
        with storage.current().open_write(str(tmp_path / "f")) as f:
            assert f.write(b"aaaaa") == 5
            assert f.write(b"bbbbb") == 3
            assert f.write(b"ccccc") == 5
    assert (tmp_path / "f").read_bytes() == b"aaaaabbbccccc"
    assert fs.firings()[0]["kept"] == 3 and fs.firings()[0]["offset"] == 5


@pytest.mark.parametrize("fill", ["zeros", "garbage"])
def test_torn_write_claims_success_but_only_a_prefix_lands(tmp_path, fill):
    with inject(faults_from([{"kind": "torn_write", "keep": 2, "fill": fill}]), rank=0):
        with storage.current().open_write(str(tmp_path / "f")) as f:
            assert f.write(b"abcdef") == 6
            assert f.write(b"gh") == 2
            digest = f
    data = (tmp_path / "f").read_bytes()
    assert len(data) == 8 and data[:2] == b"ab" and data[6:] == b"gh" and data[2:6] != b"cdef"
    if fill == "zeros":
        assert data[2:6] == bytes(4)
    import xxhash

    assert digest.digest == xxhash.xxh3_128_hexdigest(b"abcdefgh")  # the writer's checksum: what it meant


def test_slow_write_delays_each_matching_write(tmp_path):
    slept = []
    fs = FaultyFileSystem(
        LocalFileSystem(),
        faults_from([{"kind": "slow_write", "delay": 0.25, "nth": 2, "times": 2}]),
        sleep=slept.append,
    )
    with storage.use(fs):
        write_file(tmp_path / "f", [b"a"] * 5)
    assert slept == [0.25, 0.25] and len(fs.firings()) == 1


def test_real_slow_write_takes_the_time(tmp_path):
    start = time.monotonic()
    with inject(faults_from([{"kind": "slow_write", "delay": 0.1, "times": 2}]), rank=0):
        write_file(tmp_path / "f", [b"a"] * 3)
    assert time.monotonic() - start >= 0.2


@pytest.mark.parametrize("at", [0, 1, 7, 10, 11])
def test_crash_at_byte_leaves_exactly_that_many_bytes(tmp_path, at):
    spec = faults_from([{"kind": "rank_crash", "path": "*.pt", "at_byte": at, "nth": 2}])
    with pytest.raises(Crashed):
        with inject(spec, rank=0, report=tmp_path / "r.jsonl", kill=crash):
            write_file(tmp_path / "other.bin", [b"0123456789"] * 2)
            write_file(tmp_path / "first.pt", [b"0123456789"] * 2)
            write_file(tmp_path / "second.pt", [b"0123", b"456789", b"abcdef"])
    assert (tmp_path / "first.pt").stat().st_size == 20
    assert (tmp_path / "second.pt").read_bytes() == b"0123456789abcdef"[:at]
    [fired] = read_firings(tmp_path / "r.jsonl")
    assert fired["action"] == "sigkill" and fired["bytes"] == at and fired["path"].endswith("second.pt")


def test_crash_beyond_the_file_never_fires_and_is_unprobed(tmp_path):
    spec = faults_from([{"kind": "rank_crash", "path": "*.pt", "at_byte": 100}])
    with inject(spec, rank=0, report=tmp_path / "r.jsonl", kill=crash):
        write_file(tmp_path / "a.pt", [b"x" * 99])
    assert unprobed(spec, read_firings(tmp_path / "r.jsonl")) == spec


@pytest.mark.parametrize(
    "op, when, present, last",
    [
        ("fsync", "before", "tmp", "write"),
        ("fsync", "after", "tmp", "fsync"),
        ("rename", "before", "tmp", "close"),
        ("rename", "after", "final", "rename"),
    ],
)
def test_crash_before_or_after_an_operation(tmp_path, op, when, present, last):
    spec = faults_from([{"kind": "rank_crash", "op": op, "when": when}])
    with pytest.raises(Crashed):
        with inject(spec, rank=0, oplog_dir=tmp_path / "ops", kill=crash):
            write_file(tmp_path / "tmp", [b"data"])
            storage.current().rename(str(tmp_path / "tmp"), str(tmp_path / "final"))
    assert sorted(p.name for p in tmp_path.iterdir() if p.name != "ops") == [present]
    assert [o.op for o in read_ops(tmp_path / "ops")][-1] == last


def test_crash_at_the_nth_phase_and_only_on_its_thread(tmp_path):
    spec = faults_from(
        [
            {"kind": "rank_crash", "phase": "manifest", "nth": 2},
            {"kind": "rank_crash", "phase": "write", "thread": "writer"},
        ]
    )
    with pytest.raises(Crashed):
        with inject(spec, rank=0, report=tmp_path / "r.jsonl", kill=crash):
            phases.reached("write", path="x")  # main thread: the writer-thread fault ignores it
            phases.reached("manifest", iteration=1)
            phases.reached("manifest", iteration=2)
    fired = read_firings(tmp_path / "r.jsonl")
    assert [(f["phase"], f["iteration"]) for f in fired] == [("manifest", 2)]
    assert phases._listeners == []  # uninstalled

    box = []
    with inject(spec[1:], rank=0, report=tmp_path / "w.jsonl", kill=crash):

        def writer():
            try:
                phases.reached("write", path="y")
            except Crashed:
                box.append(threading.current_thread().name)

        t = threading.Thread(target=writer, name="ckpt-writer")
        t.start()
        t.join()
    assert box == ["ckpt-writer"] and read_firings(tmp_path / "w.jsonl")[0]["thread"] == "writer"


def test_operation_log_records_every_operation(tmp_path):
    with inject([], rank=3, oplog_dir=tmp_path / "ops"):
        fs = storage.current()
        fs.mkdir(str(tmp_path / "d" / "e"))
        write_file(tmp_path / "d" / "e" / "f", [b"ab", b"cd"])
        write_file(tmp_path / "d" / "g", [b"x"], sync=False)
        fs.rename(str(tmp_path / "d" / "g"), str(tmp_path / "d" / "h"))
        fs.fsync_dir(str(tmp_path / "d"))
        fs.unlink(str(tmp_path / "d" / "h"))
        fs.rmtree(str(tmp_path / "d" / "e"))
    ops = read_ops(tmp_path / "ops")
    assert [o.op for o in ops] == [
        "mkdir",
        "mkdir",
        "create",
        "write",
        "write",
        "fsync",
        "close",
        "create",
        "write",
        "close",
        "rename",
        "fsync_dir",
        "unlink",
        "rmtree",
    ]
    writes = [o for o in ops if o.op == "write"]
    assert [(o.offset, o.length) for o in writes] == [(0, 2), (2, 2), (0, 1)]
    assert {o.rank for o in ops} == {3} and ops[10].dst == str(tmp_path / "d" / "h")


def test_lost_unsynced_writes_needs_the_log():
    with pytest.raises(ConfigError, match="oplog_dir"):
        with inject(faults_from([{"kind": "lost_unsynced_writes"}]), rank=0):
            pass
