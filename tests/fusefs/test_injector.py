"""The fault decisions alone (pure logic, no mount): which records the file system carries, how it counts."""

import os

from resilience.faults import faults_from
from resilience.fusefs import Caller, seam_op
from resilience.fusefs.injector import FuseInjector

R0, R1, OUTSIDE = Caller(10, 10, 0), Caller(11, 11, 1), Caller(12, 12, None)


def test_fuse_operations_count_as_the_seams():
    assert seam_op("open", os.O_RDONLY) == "read"
    assert seam_op("open", os.O_WRONLY | os.O_TRUNC) == "create"
    assert seam_op("open", os.O_RDWR) is None
    assert [seam_op(op) for op in ("create", "write", "fdatasync", "fsync_dir", "rmdir", "flush", "link", "read")] == [
        "create",
        "write",
        "fsync",
        "fsync_dir",
        "rmtree",
        "close",
        None,
        None,
    ]


def test_counts_are_per_rank_and_callers_outside_every_rank_are_never_faulted():
    inj = FuseInjector(faults_from([{"kind": "io_error", "errno": "ENOSPC", "op": "write", "nth": 2}]))
    decided = [(c.rank, inj.before(c, "write", ("/m/f",)).error is not None) for c in (R0, R1, OUTSIDE) * 3]
    assert decided == [
        (0, False),
        (1, False),
        (None, False),
        (0, True),
        (1, True),
        (None, False),
        (0, False),
        (1, False),
        (None, False),
    ]


def test_operations_without_a_seam_word_are_never_counted():
    inj = FuseInjector(faults_from([{"kind": "io_error", "errno": "EIO", "nth": 1}]))
    assert inj.before(R0, None, ("/m/f",)).error is None  # a link, a read request
    assert inj.before(R0, "unlink", ("/m/f",)).error is not None


def test_phase_triggers_are_left_to_the_in_process_injector():
    inj = FuseInjector(
        faults_from(
            [
                {"kind": "rank_crash", "phase": "commit_rename"},
                {"kind": "rank_kill", "after": 1.0},
                {"kind": "rank_crash", "op": "rename"},
            ]
        )
    )
    assert [f.kind for f in inj.faults] == ["rank_crash"] and inj.faults[0].target.op == "rename"


def test_an_armed_byte_cuts_the_write_that_reaches_it():
    inj = FuseInjector(faults_from([{"kind": "rank_crash", "path": "*.pt", "at_byte": 10_000, "nth": 2}]))
    assert inj.arm(R0, "/m/a.pt") == [] and inj.arm(R0, "/m/b.txt") == []
    armed = inj.arm(R0, "/m/c.pt")
    assert armed == [0] and inj.cut(armed, 0, 4096) is None and inj.cut(armed, 8192, 4096) == (0, 1808)
