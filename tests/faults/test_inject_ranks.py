"""In-process faults on real multi-rank saves: each fires exactly where configured, and afterwards the
reference resumes from the newest durable valid checkpoint (fingerprint equal to a run that reached that
iteration) or refuses clearly."""

import errno
import os
import signal

import pytest

from resilience.faults import faults_from, read_firings, unprobed

from .ranks import (
    ALL,
    WORLD,
    combos,
    died_by_sigkill,
    is_local,
    load_all,
    newest_durable,
    run_job,
    save_cases,
    save_under_faults,
    shard_glob,
)

pytestmark = pytest.mark.multiprocess

SYNC_AND_ASYNC = combos(*ALL)
AT = 5000  # bytes into rank 1's shard: every layout's shard is larger


def _crash(tmp_path, combo, spec, **kw):
    root, report = str(tmp_path / "ckpt"), str(tmp_path / "fired.jsonl")
    outcome = run_job(save_under_faults, combo, root, spec, report, **kw)
    return root, outcome, read_firings(report)


# ---- crashes at an exact byte, operation or phase ------------------------------------------------------
# Every crash point of a combination runs as its own job (the rank really dies); their roots are then
# checked by one loader job.
PHASES = [
    ("staging", 1, 1),
    ("write", 1, 1),
    ("manifest", 0, 1),
    ("commit_rename", 0, 1),
    ("tracker_update", 0, 2),
    ("retention", 0, 2),
]  # phase, rank that reaches it, newest afterwards
OPS = [("fsync", "before", 1, 1), ("fsync", "after", 1, 1), ("rename", "before", 0, 1), ("rename", "after", 0, 2)]


def _crash_cases(combo):
    """(id, fault spec, rank that dies, newest checkpoint afterwards (global layouts), what the firing says)."""
    local = is_local(combo)
    shard = shard_glob(combo, 1)
    cases = [("byte", {"rank": 1, "path": shard, "at_byte": AT}, 1, 1, {"bytes": AT})]
    for phase, rank, expect in PHASES:
        rank = 1 if local else rank  # in a local save every rank commits its own folder
        cases.append((f"phase-{phase}", {"rank": rank, "phase": phase}, rank, expect, {"phase": phase}))
    for op, when, rank, expect in OPS:
        rank = 1 if local else rank
        path = shard if op == "fsync" else "*/iter_0000002"  # the rename that publishes iteration 2
        cases.append(
            (
                f"{when}-{op}",
                {"rank": rank, "op": op, "when": when, "path": path},
                rank,
                expect,
                {"op": op, "when": when},
            )
        )
    if combo.endswith("/async"):  # the background writer and the training thread, independently
        cases.append(
            (
                "writer-thread",
                {"rank": 1, "thread": "writer", "path": shard, "at_byte": AT},
                1,
                1,
                {"thread": "writer", "bytes": AT},
            )
        )
        cases.append(
            (
                "main-thread",
                {"rank": 0, "thread": "main", "phase": "async_finalize"},
                0,
                1,
                {"thread": "main", "phase": "async_finalize"},
            )
        )
    return cases


@pytest.mark.parametrize("combo", SYNC_AND_ASYNC)
def test_crash_points(tmp_path, combo):
    roots, expects = [], []
    for name, spec, rank, expect, says in _crash_cases(combo):
        case = tmp_path / name
        case.mkdir()
        root, outcome, fired = _crash(
            case, combo, [{"kind": "rank_crash", **spec}], keep_last=1 if name == "phase-retention" else None
        )
        assert died_by_sigkill(outcome, rank), (name, outcome.outcomes[rank].describe())
        assert len(fired) == 1, (name, fired)
        f = fired[0]
        assert f["action"] == "sigkill" and f["rank"] == rank and {k: f.get(k) for k in says} == says, (name, f)
        if "bytes" in says:  # the file holds exactly the bytes written before the kill
            assert os.path.getsize(f["path"]) == AT and ".staging-" in f["path"], name
        if spec.get("op") == "rename":
            assert os.path.basename(f["dst"]) == "iter_0000002", name
        newest = newest_durable(combo, root)
        if not is_local(combo):
            assert newest == expect, f"{name}: on disk the newest valid checkpoint is {newest}, expected {expect}"
        roots.append(root)
        expects.append(newest)
    for (name, *_), newest, got in zip(_crash_cases(combo), expects, load_all(combo, roots)):
        assert got.get("iteration") == newest, (name, got)
        assert got["fingerprint_ok"] and got["state_iteration"] == newest, (name, got)


# ---- faults every rank survives: errors with a real errno, writes that lie, a straggler -------------------
ERRNOS = [("ENOSPC", "write", 1), ("EIO", "fsync", 1), ("EDQUOT", "create", 1), ("EROFS", "rename", 0)]


def _surviving_cases(combo):
    local, shard = is_local(combo), shard_glob(combo, 1)
    cases = []
    for name, op, rank in ERRNOS:
        rank = 1 if local else rank
        path = "*/iter_0000002" if op == "rename" else shard
        cases.append((name, {"kind": "io_error", "errno": name, "op": op, "rank": rank, "path": path}))
    cases.append(("torn", {"kind": "torn_write", "rank": 1, "path": shard, "nth": 3, "keep": 0}))
    cases.append(("short", {"kind": "short_write", "rank": 1, "path": shard, "nth": 3, "keep": 1}))
    cases.append(("slow", {"kind": "slow_write", "rank": 1, "path": shard, "delay": 0.1, "times": 3}))
    return cases


def _check_errno(combo, name, root, results, fired):
    rank = fired["rank"]
    assert fired["errno"] == name and fired["action"] == f"raise {name}"
    text = os.strerror(getattr(errno, name))
    if is_local(combo):  # no collective in a local save: only the rank whose disk failed fails
        assert text in results[rank]["outcome"] and results[1 - rank]["outcome"] == "ok", results
    else:  # every rank learns the save failed, and why; nothing is committed
        for r in results:
            assert r["outcome"].startswith(("RankFailure", "AsyncSaveFailed")) and text in r["outcome"], r
        assert sorted(n for n in os.listdir(root) if n.startswith("iter_")) == ["iter_0000001"]
        assert open(os.path.join(root, "latest_checkpointed_iteration.txt")).read() == "1"
    return 1


@pytest.mark.parametrize("combo", SYNC_AND_ASYNC)
def test_surviving_faults(tmp_path, combo):
    """ENOSPC / EIO / EDQUOT / EROFS fail the save cleanly and the previous checkpoint loads; a torn write
    commits but is caught by its checksum on load; a short write never loads wrong values; a straggler is
    slow but commits."""
    cases = _surviving_cases(combo)
    jobs = [(str(tmp_path / name / "ckpt"), [spec], str(tmp_path / f"{name}.jsonl")) for name, spec in cases]
    for root, _, _ in jobs:
        os.makedirs(os.path.dirname(root))
    outcome = run_job(save_cases, combo, jobs)
    assert outcome.ok, outcome.failures
    per_rank = outcome.results
    for k, ((name, _), (root, _, report)) in enumerate(zip(cases, jobs)):
        results = [per_rank[r][k] for r in range(WORLD)]
        fired = read_firings(report)
        assert len(fired) == 1, (name, fired)
        fired = fired[0]
        loaded = results[0]["loaded"]
        newest = newest_durable(combo, root)
        if name in dict((e[0], 0) for e in ERRNOS):
            expect = _check_errno(combo, name, root, results, fired)
        else:
            assert [r["outcome"] for r in results] == ["ok"] * WORLD, (name, results)
            expect = None
        if name == "torn":
            assert fired["action"] == "torn" and fired["kept"] == 0
            assert loaded.get("iteration") == 1 and any("checksum" in w for w in loaded["warnings"]), loaded
            expect = 1 if is_local(combo) else None
            newest = 1
        elif name == "short":
            assert fired["action"] == "short" and fired["kept"] == 1
            # the checksums describe what landed, so only the format can refuse it: an older one loads
            assert loaded.get("iteration") in (1, newest), (name, loaded)
            newest = loaded.get("iteration")
        elif name == "slow":
            assert fired["action"] == "slow" and results[1]["seconds"] >= 0.3
            expect = 2
        if expect is not None and not is_local(combo):
            assert newest == expect, (name, newest)
        assert "refused" not in loaded and loaded["iteration"] == newest, (name, loaded)
        assert loaded["fingerprint_ok"] and loaded["state_iteration"] == newest, (name, loaded)


def test_a_fault_that_never_fires_is_unprobed(tmp_path):
    """A writer-thread fault on a sync save never fires: the report shows it, so the run says UNPROBED."""
    spec = faults_from(
        [{"kind": "rank_crash", "thread": "writer", "at_byte": 10}, {"kind": "slow_write", "rank": 0, "delay": 0.0}]
    )
    root, outcome, fired = _crash(tmp_path, "LEGACY/torch/sync", spec)
    assert outcome.ok
    assert unprobed(spec, fired) == spec[:1]
    assert all(o.signal != signal.SIGKILL for o in outcome.outcomes)
