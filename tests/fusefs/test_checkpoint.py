"""The same crash record that the in-process seam carries (tests/faults/test_inject_ranks.py, case
"byte"), carried out by the file system on a real 2-rank save of the reference: rank 1 dies with
exactly AT bytes of its shard on disk, and the newest valid checkpoint afterwards is the previous one."""

import os
import time

import pytest

from resilience.fusefs import mounted, read_log

from ..faults.ranks import (
    WORLD,
    combos,
    died_by_sigkill,
    load_all,
    newest_durable,
    save_under_faults,
    staging_glob,
    start_job,
)

pytestmark = pytest.mark.multiprocess
AT = 5000


def _after_go(ctx, go, *args):
    """Wait until the mount attributes this rank (the test creates `go` after set_ranks), then save."""
    while not os.path.exists(go):
        time.sleep(0.01)
    return save_under_faults(ctx, *args)


@pytest.mark.parametrize("combo", combos("LEGACY/torch/sync", "GLOBAL/torch_dist/async"))
def test_a_crash_at_a_byte_of_a_real_save(dirs, tmp_path, combo):
    backing, mnt, log = dirs
    fault = {"kind": "rank_crash", "rank": 1, "path": staging_glob(combo, 1, 2), "at_byte": AT}
    go = str(tmp_path / "go")
    with mounted(backing, mnt, log=log, faults=[fault]) as m:
        job = start_job(_after_go, go, combo, str(mnt / "ckpt"), [])
        try:
            m.set_ranks(dict(enumerate(job.pids)))
            open(go, "w").close()
            outcome = job.wait()
        finally:
            job.teardown()
        fired = m.firings()
        assert died_by_sigkill(outcome, 1), outcome.outcomes[1].describe()
        assert newest_durable(combo, mnt / "ckpt") == 1
        loaded = load_all(combo, [mnt / "ckpt"])  # the loader reads through the mount too
    assert len(fired) == 1 and fired[0]["rank"] == 1 and fired[0]["bytes"] == AT
    assert os.path.getsize(backing / os.path.relpath(fired[0]["path"], mnt)) == AT
    assert loaded[0]["iteration"] == 1 and loaded[0]["fingerprint_ok"]
    writers = {(r["rank"], r["thread"]) for r in read_log(log) if r["op"] == "write" and r["rank"] is not None}
    assert {rank for rank, _ in writers} == set(range(WORLD))
    if combo.endswith("/async"):  # the background writer thread is attributed to its rank
        assert "writer" in {t for _, t in writers}
