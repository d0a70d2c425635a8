"""Power loss inside the file system: from the mount's log, the crash states keep what an fsync made
durable and may lose the rest, under the record's persistence model, as for an in-process run."""

import os
import signal

import pytest

from resilience.faults import Snapshot, faults_from
from resilience.fusefs import mounted, power_loss_states, read_log
from tests.folders import contents

from .procs import Rank

pytestmark = pytest.mark.multiprocess
SYNCED, UNSYNCED = os.urandom(50_000), os.urandom(70_000)


def _fsync_dir(path):
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    os.fsync(fd)
    os.close(fd)


def _save(conn, mnt):
    """synced.pt made durable (the file, its folder and the folder's parent fsynced, as POSIX asks);
    unsynced.pt written and closed, never fsynced; then unsynced.pt renamed to final.pt."""
    os.makedirs(f"{mnt}/ckpt")
    _fsync_dir(mnt)
    with open(f"{mnt}/ckpt/synced.pt", "wb") as f:
        f.write(SYNCED)
        f.flush()
        os.fsync(f.fileno())
    _fsync_dir(f"{mnt}/ckpt")
    with open(f"{mnt}/ckpt/unsynced.pt", "wb") as f:
        f.write(UNSYNCED)
    os.rename(f"{mnt}/ckpt/unsynced.pt", f"{mnt}/ckpt/final.pt")
    return "saved"


@pytest.mark.parametrize("model", ["ext4_ordered", "posix_minimum"])
def test_unsynced_data_is_lost_in_a_power_loss_state_while_fsynced_data_survives(dirs, tmp_path, model):
    backing, mnt, log = dirs
    fault = {"kind": "lost_unsynced_writes", "persistence": model, "max_states": 16}
    snapshot = Snapshot.empty(mnt)  # the folder as the ranks see it, empty before the save
    with mounted(backing, mnt, log=log, faults=[fault]) as m:
        p = Rank(_save, str(mnt))
        m.set_ranks({0: p.pid})
        assert p.go().wait() == (0, ("ok", "saved"))
    fired = m.firings()
    assert [(f["action"], f["when"]) for f in fired] == [("power_loss", "after the last operation")]
    states = power_loss_states(faults_from([fault])[0], snapshot, log, tmp_path / "states")
    trees = [contents(s.path, folders=False) for s in states.states]
    assert states.model == model and len(trees) > 2
    assert all(t.get("ckpt/synced.pt") == SYNCED for t in trees)  # durable in every state
    assert trees[0] == {"ckpt/synced.pt": SYNCED}  # "fsynced only": the unsynced file is gone
    assert {"ckpt/synced.pt": SYNCED, "ckpt/final.pt": UNSYNCED} in trees  # everything landed
    assert any(t.get("ckpt/final.pt", t.get("ckpt/unsynced.pt")) not in (None, UNSYNCED) for t in trees)  # torn
    assert states.notes == []


def _sync_by_reopening(conn, mnt):
    """Written and closed, then opened again read-only and fsynced there (Linux syncs the file, whichever
    descriptor asks): then renamed into place, the folder fsynced."""
    os.makedirs(f"{mnt}/ckpt")
    _fsync_dir(mnt)
    with open(f"{mnt}/ckpt/meta.tmp", "wb") as f:
        f.write(SYNCED)
    fd = os.open(f"{mnt}/ckpt/meta.tmp", os.O_RDONLY)
    os.fsync(fd)
    os.close(fd)
    os.rename(f"{mnt}/ckpt/meta.tmp", f"{mnt}/ckpt/meta.json")
    _fsync_dir(f"{mnt}/ckpt")
    return "saved"


def test_an_fsync_through_a_file_opened_again_to_read_makes_it_durable(dirs, tmp_path):
    backing, mnt, log = dirs
    fault = {"kind": "lost_unsynced_writes", "max_states": 8}
    snapshot = Snapshot.empty(mnt)
    with mounted(backing, mnt, log=log, faults=[fault]) as m:
        p = Rank(_sync_by_reopening, str(mnt))
        m.set_ranks({0: p.pid})
        assert p.go().wait() == (0, ("ok", "saved"))
    states = power_loss_states(faults_from([fault])[0], snapshot, log, tmp_path / "states")
    trees = [contents(s.path, folders=False) for s in states.states]
    assert trees and all(t == {"ckpt/meta.json": SYNCED} for t in trees), [sorted(t) for t in trees]


def _idle(conn):
    conn.recv()
    return "never"


def test_a_power_loss_at_a_crash_point_stops_every_rank_and_the_disk(dirs, tmp_path):
    backing, mnt, log = dirs
    fault = {"kind": "lost_unsynced_writes", "rank": 0, "op": "rename", "when": "before", "path": "*unsynced.pt"}
    snapshot = Snapshot.empty(mnt)
    with mounted(backing, mnt, log=log, faults=[fault]) as m:
        saver, other = Rank(_save, str(mnt)), Rank(_idle)
        m.set_ranks({0: saver.pid, 1: other.pid})
        saver.go()
        other.go()
        assert saver.wait()[0] == -signal.SIGKILL and other.wait()[0] == -signal.SIGKILL  # the machine is off
        with pytest.raises(OSError):  # and so is the disk, for everyone
            (mnt / "later").write_bytes(b"x")
    assert [f["action"] for f in m.firings()] == ["power_loss"]
    assert sorted(os.listdir(backing / "ckpt")) == ["synced.pt", "unsynced.pt"]  # the rename never happened
    assert not any(r["path"].endswith("later") for r in read_log(log) if r["op"] == "create")
    states = power_loss_states(faults_from([fault])[0], snapshot, log, tmp_path / "states")
    trees = [contents(s.path, folders=False) for s in states.states]
    assert trees and all(t.get("ckpt/synced.pt") == SYNCED and "ckpt/final.pt" not in t for t in trees)


def test_operations_crash_states_cannot_replay_are_named(dirs, tmp_path):
    backing, mnt, log = dirs
    (backing / "old.bin").write_bytes(b"before the mount")
    snapshot = Snapshot.take(backing, tmp_path / "snap")
    snapshot = Snapshot(str(mnt), snapshot.copy)
    fault = {"kind": "lost_unsynced_writes"}
    with mounted(backing, mnt, log=log, faults=[fault]):
        with open(mnt / "old.bin", "r+b") as f:  # written in place, no O_TRUNC: no create to replay against
            f.write(b"B")
        os.link(mnt / "old.bin", mnt / "alias.bin")
    states = power_loss_states(faults_from([fault])[0], snapshot, log, tmp_path / "states")
    assert any("write" in n and "old.bin" in n for n in states.notes)
    assert any("link" in n and "alias.bin" in n for n in states.notes)


def _o_sync(conn, mnt):
    fd = os.open(f"{mnt}/synced.bin", os.O_WRONLY | os.O_CREAT | os.O_SYNC, 0o644)
    os.write(fd, SYNCED)
    os.close(fd)
    return "written"


def test_a_write_to_an_o_sync_file_is_durable_when_it_returns(dirs, tmp_path):
    """Under POSIX minimum only the data is durable (the new name is not, no folder fsync): every state
    where the file exists holds all of it, never a torn or empty one."""
    backing, mnt, log = dirs
    fault = {"kind": "lost_unsynced_writes", "persistence": "posix_minimum"}
    with mounted(backing, mnt, log=log, faults=[fault]) as m:
        p = Rank(_o_sync, str(mnt))
        m.set_ranks({0: p.pid})
        assert p.go().wait() == (0, ("ok", "written"))
    states = power_loss_states(faults_from([fault])[0], Snapshot.empty(mnt), log, tmp_path / "states")
    trees = [contents(s.path, folders=False) for s in states.states]
    assert {} in trees and {"synced.bin": SYNCED} in trees and all(t in ({}, {"synced.bin": SYNCED}) for t in trees)
