"""The file system's log, written by fusefs.journal and read back by faults.fuse_log (the reader the timeline
uses, below the report layer): no mount needed."""

from __future__ import annotations

import time

from resilience.faults.fuse_log import FUSE_LOG, read_log
from resilience.fusefs.journal import Journal
from resilience.fusefs.words import Caller


def test_what_the_journal_writes_the_reader_reads_back_in_order(tmp_path):
    journal = Journal(tmp_path / "log", str(tmp_path / "mnt"))
    caller = Caller(pid=11, tgid=10, rank=1, thread="writer")
    journal.entry("create", caller, "/a", flags=0o1101)
    journal.entry("rename", caller, "/a", dst="/b", error=2)
    journal.close()
    recs = read_log(tmp_path / "log")
    assert [(r["op"], r["seq"]) for r in recs] == [("create", 1), ("rename", 2)]
    assert recs[0]["path"] == str(tmp_path / "mnt" / "a") and recs[0]["rank"] == 1 and recs[0]["tid"] == 11
    assert recs[1]["dst"] == str(tmp_path / "mnt" / "b") and recs[1]["errno"] == "ENOENT"


def test_the_reader_sorts_by_seq_and_skips_a_torn_last_line(tmp_path):
    (tmp_path / FUSE_LOG).write_text('{"op": "write", "seq": 2}\n{"op": "create", "seq": 1}\n{"op": "fsy')
    assert [r["op"] for r in read_log(tmp_path)] == ["create", "write"]
    assert read_log(tmp_path / "nothing-here") == []


def test_the_seam_log_is_written_in_order_with_the_times_the_operations_ran(tmp_path):
    """The seam's log is written by a thread of its own: whole at close, in the operations' order, each
    with its own time, and a write's bytes as they were when it ran (libfuse reuses the request's buffer)."""

    from resilience.faults.oplog import read_blob, read_ops

    journal = Journal(tmp_path / "log", str(tmp_path / "mnt"))
    caller = Caller(pid=11, tgid=10, rank=0, thread="writer")
    buffer = bytearray(b"first")
    journal.seam("create", caller, "/f", stream="s")
    before = time.monotonic_ns()
    journal.seam("write", caller, "/f", data=memoryview(buffer), stream="s", offset=0)
    buffer[:] = b"later"  # the request's buffer, reused
    for i in range(200):  # more than wait at once: the request path waits for the log, nothing is dropped
        journal.seam("write", caller, "/f", data=b"x", stream="s", offset=5 + i)
    journal.seam("fsync", caller, "/f", stream="s")
    journal.close()
    ops = read_ops(tmp_path / "log")
    assert [o.op for o in ops] == ["create", "write"] + ["write"] * 200 + ["fsync"]
    assert [o.seq for o in ops] == list(range(1, 204))
    assert read_blob(tmp_path / "log", ops[1]) == b"first" and ops[1].t >= before
    assert all(a.t <= b.t for a, b in zip(ops, ops[1:]))


def test_a_lost_record_of_the_seam_log_fails_the_next_operation_and_the_close(tmp_path):
    import pytest

    journal = Journal(tmp_path / "log", str(tmp_path / "mnt"))
    caller = Caller(pid=11, tgid=10, rank=0, thread="writer")
    journal.seam("create", caller, "/f", stream="s")
    journal.seam("write", caller, "/f", data=b"abc", stream="s", offset=0, bad=object())  # not JSON: lost
    with pytest.raises(OSError, match="could not be written"):
        for _ in range(1000):  # the writer thread gets to it
            journal.seam("fsync", caller, "/f", stream="s")
            time.sleep(0.001)
    with pytest.raises(OSError, match="lost a record"):
        journal.close()
