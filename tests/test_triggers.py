"""The trigger rules alone (resilience.triggers): hand-written operation sequences and the decisions every
carrier must get for them. No files, no mount, no clock."""

import pytest

from resilience.faults import HTTP_OPS, OPS, faults_from
from resilience.triggers import CRASH, FILE_EFFECTS, HTTP_EFFECTS, SLOW, Carries, Decision, Matcher, counts

MAIN, WRITER = "main", "writer"


def said(d: Decision) -> str:
    """One decision in a few words: "slow 0 (first), error 1 EIO", "crash 2", "short 0=3 torn 1=2", "-"."""
    words = [f"slow {s.index}" + (" (first)" if s.first else "") for s in d.slow]
    if d.error is not None:
        words.append(f"error {d.error.index} {d.error.errno}")
    if d.answer is not None:
        words.append(f"answer {d.answer.index} {d.answer.status} {d.answer.code}")
    if d.crash is not None:
        words.append(f"crash {d.crash}")
    words += [f"{'torn' if p.torn else 'short'} {p.index}={p.kept}" for p in d.partial]
    words += [f"reset {d.reset.index}={d.reset.kept}"] if d.reset is not None else []
    words += [f"lose {d.lose}"] if d.lose is not None else []
    return ", ".join(words) or "-"


def play(m: Matcher, steps, *, fire=True) -> list[str]:
    """Each step (rank, op, path or (src, dst)[, thread]) as a carrier meets it, a write of 10 bytes: what
    was decided, and the crash due after it. A carrier tells the matcher what fired (`fire`)."""
    out = []
    for step in steps:
        rank, op, path, thread = (*step, MAIN)[:4]
        d = m.operation(op, (path,) if isinstance(path, str) else path, rank=rank, thread=thread, length=10)
        after = m.after(d) if d.error is None and d.answer is None and d.crash is None else None
        if fire:
            for i in [s.index for s in d.slow if s.first] + [p.index for p in d.partial]:
                m.fired(i, rank)
            answer, reset = d.answer.index if d.answer else None, d.reset.index if d.reset else None
            for i in (d.error.index if d.error else None, answer, d.crash, reset, d.lose, after):
                if i is not None:
                    m.fired(i, rank)
        out.append(said(d) + (f" | after: crash {after}" if after is not None else ""))
    return out


def matcher(*records, arm_at=None) -> Matcher:
    return Matcher(faults_from(list(records)), arm_at)


# ---- which operations a record counts ----------------------------------------------------------------
@pytest.mark.parametrize(
    "record, counted",
    [
        ({"kind": "io_error"}, set(OPS)),
        ({"kind": "io_error", "op": "rename"}, {"rename"}),
        ({"kind": "slow_write"}, {"write"}),
        ({"kind": "slow_write", "op": "fsync"}, {"fsync"}),
        ({"kind": "short_write"}, {"write"}),
        ({"kind": "torn_write"}, {"write"}),
        ({"kind": "rank_crash", "op": "fsync_dir"}, {"fsync_dir"}),
        ({"kind": "rank_crash", "at_byte": 10}, set()),  # counts opens for writing (open_write)
        ({"kind": "rank_crash", "phase": "commit_rename"}, set()),  # counts phases
        ({"kind": "lost_unsynced_writes", "op": "rename", "when": "after"}, {"rename"}),
        ({"kind": "lost_unsynced_writes"}, set()),  # strikes at close
        ({"kind": "rank_kill", "after": 1.0}, set()),  # the nemesis: no carrier of I/O counts it
    ],
)
def test_which_operations_each_record_counts(record, counted):
    [f] = faults_from([record])
    assert {op for op in OPS if counts(f, op)} == counted


@pytest.mark.parametrize(
    "record, counted",
    [
        ({"kind": "http_error"}, set(HTTP_OPS)),
        ({"kind": "http_error", "op": "mpu_part"}, {"mpu_part"}),
        ({"kind": "connection_reset", "op": "put"}, {"put"}),
        ({"kind": "response_lost", "op": "mpu_complete"}, {"mpu_complete"}),
        ({"kind": "slow_write", "op": "get"}, {"get"}),
        ({"kind": "slow_write"}, set()),  # a file's writes: no request is one
        ({"kind": "rank_crash", "op": "mpu_part", "when": "after"}, {"mpu_part"}),
    ],
)
def test_which_requests_each_record_counts(record, counted):
    [f] = faults_from([record])
    assert {op for op in HTTP_OPS if counts(f, op)} == counted


# ---- matching and counting ---------------------------------------------------------------------------
def test_counts_are_per_record_and_rank_and_match_rank_path_and_thread():
    m = matcher(
        {"kind": "io_error", "errno": "ENOSPC", "op": "write", "path": "*.pt", "nth": 2},
        {"kind": "io_error", "errno": "EIO", "rank": 1, "op": "fsync", "thread": "writer"},
    )
    assert play(
        m,
        [
            (0, "write", "/c/a.pt"),
            (1, "write", "/c/a.pt"),
            (0, "write", "/c/a.bin"),  # another file: not counted
            (0, "fsync", "/c/a.pt", WRITER),  # rank 0 is not targeted by the second
            (1, "fsync", "/c/a.pt", MAIN),  # the wrong thread
            (0, "write", "/c/b.pt"),  # rank 0's second: fires
            (1, "fsync", "/c/a.pt", WRITER),
            (1, "write", "/c/sub/c.pt"),  # '*' crosses '/': rank 1's second
            (0, "write", "/c/d.pt"),  # fired: counts no more
            (None, "write", "/c/e.pt"),  # outside every rank: never faulted
            (0, None, "/c/e.pt"),  # an operation the seam has no word for
        ],
    ) == ["-", "-", "-", "-", "-", "error 0 ENOSPC", "error 1 EIO", "error 0 ENOSPC", "-", "-", "-"]


def test_a_rename_matches_on_either_name():
    m = matcher({"kind": "io_error", "errno": "EROFS", "op": "rename", "path": "*.final"})
    assert play(m, [(0, "rename", ("/c/a.tmp", "/c/b.tmp")), (0, "rename", ("/c/a.tmp", "/c/a.final"))]) == [
        "-",
        "error 0 EROFS",
    ]


def test_a_record_armed_late_counts_nothing_of_a_rank_before_it_reaches_the_point():
    m = matcher({"kind": "io_error", "op": "write"}, {"kind": "io_error", "op": "fsync"}, arm_at=[2, None])
    before = play(m, [(0, "write", "/a"), (1, "write", "/a"), (0, "fsync", "/a")])
    m.reached(0, 1)
    early = play(m, [(0, "write", "/a")])
    m.reached(0, 2)
    m.reached(0, 1)  # a rank never goes back
    armed = play(m, [(1, "write", "/a"), (0, "write", "/a")])
    assert (before, early, armed) == (["-", "-", "error 1 EIO"], ["-"], ["-", "error 0 EIO"])


def test_a_record_fires_once_whether_or_not_the_carrier_told_it_fired():
    m = matcher({"kind": "io_error", "op": "write"})
    assert play(m, [(0, "write", "/a")] * 2) == ["error 0 EIO", "-"]
    m = matcher({"kind": "io_error", "op": "write"})
    assert play(m, [(0, "write", "/a")] * 2, fire=False) == ["error 0 EIO", "-"]  # past nth all the same


def test_a_slow_record_slows_every_match_from_its_nth_on_times_of_them_per_rank():
    m = matcher({"kind": "slow_write", "delay": 0.5, "nth": 2, "times": 2})
    assert play(m, [(0, "write", "/a"), (0, "write", "/a"), (1, "write", "/a")] + [(0, "write", "/a")] * 2) == [
        "-",
        "slow 0 (first)",
        "-",
        "slow 0",
        "-",  # its two times are spent on rank 0
    ]
    assert play(m, [(1, "write", "/a")] * 2) == ["slow 0 (first)", "slow 0"]  # rank 1 has its own
    unbounded = matcher({"kind": "slow_write", "delay": 0.25}, {"kind": "slow_write", "delay": 0.5})
    d = unbounded.operation("write", ("/a",), rank=0, thread=MAIN)
    assert d.delay == 0.75 and [s.index for s in d.slow] == [0, 1]


# ---- the order within one operation ------------------------------------------------------------------
def test_slow_then_fail_then_crash_before_then_a_short_or_torn_write_then_crash_after():
    m = matcher(
        {"kind": "slow_write", "delay": 0.1},
        {"kind": "rank_crash", "op": "write", "when": "before", "nth": 2},
        {"kind": "io_error", "op": "write", "nth": 2},
        {"kind": "short_write", "keep": 3, "nth": 3},
        {"kind": "torn_write", "keep": 6, "fill": "garbage", "nth": 3, "seed": 7},
        {"kind": "short_write", "nth": 3},  # half of 10
        {"kind": "rank_crash", "op": "write", "when": "after", "nth": 3},
        {"kind": "rank_crash", "op": "write", "nth": 4},
    )
    assert play(m, [(0, "write", "/a")] * 4) == [
        "slow 0 (first)",
        "slow 0, error 2 EIO",  # the failure wins: the crash before it never comes
        "slow 0, short 3=3, torn 4=6, short 5=5 | after: crash 6",
        "slow 0, crash 7",
    ]
    d = matcher(
        {"kind": "short_write", "keep": 3}, {"kind": "torn_write", "keep": 6, "fill": "garbage", "seed": 7}
    ).operation("write", ("/a",), rank=0, thread=MAIN, length=10)
    assert d.kept(10) == 3 and d.tear is not None and (d.tear.index, d.tear.kept) == (1, 6)
    assert d.tear.fill_bytes(4) == d.tear.fill_bytes(4) != bytes(4)  # seeded: the same noise every time
    assert (
        matcher({"kind": "short_write", "keep": 30})
        .operation("write", ("/a",), rank=0, thread=MAIN, length=10)
        .kept(10)
        == 10
    )


def test_a_crash_before_ends_the_decision_and_only_the_first_due_one_strikes():
    m = matcher(
        {"kind": "rank_crash", "op": "rename"},
        {"kind": "lost_unsynced_writes", "op": "rename"},
        {"kind": "rank_crash", "op": "rename", "when": "after"},
    )
    assert play(m, [(0, "rename", ("/a", "/b"))]) == ["crash 0"]


def test_on_a_request_slow_then_answer_then_crash_before_then_reset_and_lose_then_crash_after():
    m = matcher(
        {"kind": "slow_write", "op": "put", "delay": 0.1},
        {"kind": "rank_crash", "op": "put", "nth": 2, "rank": 0},
        {"kind": "http_error", "op": "put", "nth": 2, "rank": 0},
        {"kind": "connection_reset", "op": "put", "nth": 3, "rank": 0},
        {"kind": "response_lost", "op": "put", "nth": 3, "rank": 0},
        {"kind": "rank_crash", "op": "put", "when": "after", "nth": 3, "rank": 0},
        {"kind": "rank_crash", "op": "put", "nth": 4, "rank": 0},
        {"kind": "http_error", "status": 500, "path": "*.pt", "rank": 1},
    )
    assert play(m, [(0, "put", "a.pt")] * 4 + [(1, "put", "a.bin"), (1, "put", "b.pt"), (1, "put", "c.pt")]) == [
        "slow 0 (first)",
        "slow 0, answer 2 503 SlowDown",  # the error answer wins: the crash before it never comes
        "slow 0, reset 3=5, lose 4 | after: crash 5",  # the carrier resets: nothing is answered to lose
        "slow 0, crash 6",
        "slow 0 (first)",
        "slow 0, answer 7 500 InternalError",
        "slow 0",  # fired once
    ]
    d = matcher({"kind": "connection_reset", "keep": 3}).operation("get", ("k",), rank=0, thread=MAIN, length=10)
    assert d.reset is not None and d.reset.kept == 3


# ---- a crash at a byte -------------------------------------------------------------------------------
def test_a_crash_at_a_byte_is_armed_by_the_nth_matching_open_and_cuts_the_write_reaching_it():
    m = matcher({"kind": "rank_crash", "path": "*.pt", "at_byte": 10_000, "nth": 2, "thread": "main"})
    assert m.open_write("/c/a.pt", rank=0, thread=MAIN) == []
    assert m.open_write("/c/b.txt", rank=0, thread=MAIN) == []
    assert m.open_write("/c/b.pt", rank=0, thread=WRITER) == []  # the wrong thread
    assert m.open_write("/c/c.pt", rank=1, thread=MAIN) == []  # rank 1's first
    armed = m.open_write("/c/d.pt", rank=0, thread=MAIN)
    assert armed == [0] and m.at_open(armed) is None
    assert m.cut(armed, 0, 4096) is None and m.cut(armed, 8192, 4096) == (0, 1808)
    assert m.cut(armed, 10_000, 10) is None  # already past it
    assert m.open_write("/c/e.pt", rank=0, thread=MAIN) == []  # the nth is behind it
    assert m.open_write("/c/f.pt", rank=None, thread=MAIN) == []


def test_a_crash_at_byte_zero_strikes_at_the_open_and_an_armed_point_holds_for_opens_too():
    m = matcher({"kind": "lost_unsynced_writes", "at_byte": 0}, arm_at=[3])
    assert m.open_write("/a", rank=0, thread=MAIN) == []
    m.reached(0, 3)
    armed = m.open_write("/b", rank=0, thread=MAIN)
    assert armed == [0] and m.at_open(armed) == 0


# ---- a phase, and the close -------------------------------------------------------------------------
def test_a_crash_at_the_nth_phase_on_its_thread():
    m = matcher({"kind": "rank_crash", "phase": "manifest", "nth": 2}, {"kind": "rank_crash", "phase": "write"})
    assert [m.phase(p, rank=0, thread=MAIN) for p in ("write", "manifest", "manifest")] == [1, None, 0]
    m = matcher({"kind": "rank_crash", "phase": "write", "thread": "writer", "rank": 1})
    seen = [m.phase("write", rank=r, thread=t) for r, t in ((0, WRITER), (1, MAIN), (1, WRITER))]
    assert seen == [None, None, 0]


def test_a_power_loss_with_no_crash_point_strikes_at_close_once_per_rank_it_targets_and_armed():
    m = matcher(
        {"kind": "lost_unsynced_writes"},
        {"kind": "lost_unsynced_writes", "rank": [1, 2]},
        {"kind": "lost_unsynced_writes", "rank": 3},
        {"kind": "lost_unsynced_writes", "op": "fsync"},  # a crash point: never at close
        {"kind": "lost_unsynced_writes", "at_byte": 5},
        {"kind": "lost_unsynced_writes", "rank": 2},
        arm_at=[None, 1, None, None, None, 4],
    )
    m.reached(1, 1)
    assert m.at_close([0, 1, 2]) == [(0, 0), (0, 1), (0, 2), (1, 1), (2, None)]
    m.fired(0, 2)  # fired on one rank: done for the map
    assert [i for i, _ in m.at_close([0, 1, 2])] == [1, 2]


# ---- what a carrier carries ---------------------------------------------------------------------------
def test_a_carrier_says_what_it_carries_by_effect_and_whether_it_hears_phases():
    from resilience.faults import KINDS

    in_rank = Carries("in rank", frozenset(FILE_EFFECTS), phases=True)
    below = Carries("below", frozenset(FILE_EFFECTS), phases=False)
    failing_only = Carries("failing only", frozenset({"fail"}), phases=False)
    phase, op, kill = faults_from(
        [
            {"kind": "rank_crash", "phase": "write"},
            {"kind": "rank_crash", "op": "fsync"},
            {"kind": "rank_kill", "after": 1},
        ]
    )
    assert [in_rank.carries(f) for f in (phase, op, kill)] == [True, True, False]
    assert [below.carries(f) for f in (phase, op, kill)] == [False, True, False]
    assert failing_only.kinds(KINDS.values()) == ["io_error"]
    assert set(below.kinds(KINDS.values())) == {
        "io_error",
        "short_write",
        "torn_write",
        "slow_write",
        "rank_crash",
        "lost_unsynced_writes",
    }


def test_a_carrier_of_requests_takes_a_delay_or_crash_only_aimed_at_a_request_and_a_file_carrier_none():
    from resilience.faults import KINDS

    proxy = Carries(
        "proxy", frozenset(HTTP_EFFECTS) | {SLOW, CRASH}, False, frozenset(HTTP_OPS), frozenset({SLOW, CRASH})
    )
    seam = Carries("seam", frozenset(FILE_EFFECTS), phases=True, ops=frozenset(OPS))
    records = faults_from(
        [
            {"kind": "http_error"},
            {"kind": "response_lost", "op": "put"},
            {"kind": "slow_write", "op": "mpu_part"},
            {"kind": "rank_crash", "op": "mpu_complete"},
            {"kind": "slow_write"},  # a file's writes
            {"kind": "rank_crash", "op": "fsync"},
            {"kind": "rank_crash", "at_byte": 10},
            {"kind": "io_error"},
        ]
    )
    assert [proxy.carries(f) for f in records] == [True, True, True, True, False, False, False, False]
    assert [seam.carries(f) for f in records] == [False, False, False, False, True, True, True, True]
    assert set(proxy.kinds(KINDS.values())) == {
        "http_error",
        "connection_reset",
        "response_lost",
        "slow_write",
        "rank_crash",
    }
    assert proxy.describe(KINDS.values()).endswith("(slow_write, rank_crash only at a target.op it meets)")


def test_arming_points_must_match_the_records():
    with pytest.raises(ValueError, match="2 arming points for 1 fault records"):
        matcher({"kind": "io_error"}, arm_at=[None, 1])
