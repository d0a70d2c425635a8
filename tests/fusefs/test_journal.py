"""The file system's log, written by fusefs.journal and read back by faults.fuse_log (the reader the timeline
uses, below the report layer): no mount needed."""

from __future__ import annotations

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
