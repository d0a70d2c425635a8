"""Crash states on a small hand-checked example, and on a real single-process save."""

import os

import pytest

from resilience import storage
from resilience.checkpoint import ReferenceBackend, list_checkpoints
from resilience.faults import Snapshot, crash_states, faults_from, inject, power_loss_states, read_ops
from resilience.state import ModelSpec, Topology, TrainingState
from resilience.vocab import combination
from tests.folders import contents


@pytest.fixture
def example(tmp_path):
    """root holds old=OLD. Then: create a, write 'hello', fsync a, fsync root (a and its data are durable);
    create b, write 'xy', rename a -> c, unlink old: four operations no fsync covers."""
    root = tmp_path / "root"
    root.mkdir()
    (root / "old").write_bytes(b"OLD")
    snap = Snapshot.take(root, tmp_path / "snap")
    with inject([], rank=0, oplog_dir=tmp_path / "ops"):
        fs = storage.current()
        with fs.open_write(str(root / "a"), sync=False) as f:
            f.write(b"hello")
            f.fsync()
        fs.fsync_dir(str(root))
        with fs.open_write(str(root / "b"), sync=False) as f:
            f.write(b"xy")
        fs.rename(str(root / "a"), str(root / "c"))
        fs.unlink(str(root / "old"))
    return snap, tmp_path / "ops", tmp_path


def _expected(torn: bool) -> set:
    """b: absent / empty / torn ('x') / whole; a renamed to c or not; old unlinked or not. The fsynced
    'hello' is in every state."""
    out = set()
    for b in [None, b"", b"x", b"xy"] if torn else [None, b"", b"xy"]:
        for name in ("a", "c"):
            for old in (True, False):
                state = {name: b"hello"}
                if b is not None:
                    state["b"] = b
                if old:
                    state["old"] = b"OLD"
                out.add(frozenset(state.items()))
    return out


@pytest.mark.parametrize("torn", [True, False])
def test_hand_checked_example_gives_the_expected_set(example, torn):
    snap, ops, tmp = example
    got = crash_states(snap, ops, tmp / "states", max_states=64, torn=torn, model="posix_minimum")
    states = [frozenset(contents(s.path).items()) for s in got.states]
    assert len(states) == len(set(states))  # distinct
    assert set(states) == _expected(torn)
    assert len(got.unsynced) == 4 and got.explored >= len(states) and not got.bounded
    first, everything = got.states[0], got.states[1]
    assert first.how == "fsynced only" and contents(first.path) == {"a": b"hello", "old": b"OLD"}
    assert everything.how == "every operation landed" and contents(everything.path) == {"b": b"xy", "c": b"hello"}
    assert str(got.summary()).startswith(f"{len(states)} distinct crash states")


def test_enumeration_is_bounded_and_says_so(example):
    snap, ops, tmp = example
    got = crash_states(snap, ops, tmp / "states", max_states=3, model="posix_minimum")
    assert len(got.states) == 3 and got.bounded
    assert [s.how for s in got.states][:2] == ["fsynced only", "every operation landed"]
    assert sorted(os.listdir(tmp / "states")) == ["state_0000", "state_0001", "state_0002"]


def test_same_seed_same_states(example):
    snap, ops, tmp = example
    a = crash_states(snap, ops, tmp / "s1", max_states=12, seed=5)
    b = crash_states(snap, ops, tmp / "s2", max_states=12, seed=5)
    assert [(s.persisted, s.torn) for s in a.states] == [(s.persisted, s.torn) for s in b.states]


def test_rename_is_durable_only_once_the_folder_is_fsynced(tmp_path):
    root = tmp_path / "root"
    root.mkdir()
    with inject([], rank=0, oplog_dir=tmp_path / "ops"):
        fs = storage.current()
        with fs.open_write(str(root / "t.tmp")) as f:  # fsynced on close
            f.write(b"7")
        fs.rename(str(root / "t.tmp"), str(root / "tracker"))
    got = crash_states(Snapshot.empty(root), tmp_path / "ops", tmp_path / "states", model="posix_minimum")
    # the file's data was fsynced but no folder was: its name may not survive at all
    assert contents(got.states[0].path) == {}
    assert {frozenset(contents(s.path)) for s in got.states} == {
        frozenset(),
        frozenset({"t.tmp"}),
        frozenset({"tracker"}),
    }


SPEC = ModelSpec(num_layers=2, hidden=16, ffn_hidden=32, heads=2, vocab=64)


class Crashed(BaseException):
    """Stands in for the kill: this one process cannot SIGKILL itself and go on testing."""


def _crash():
    raise Crashed()


@pytest.mark.parametrize(
    "point, newest",
    [({}, 2), ({"phase": "commit_rename"}, 1), ({"phase": "tracker_update"}, 2), ({"op": "fsync", "path": "*.pt"}, 1)],
)
def test_a_reference_save_leaves_only_durable_states(tmp_path, point, newest):
    """One process, LEGACY: every crash state of a save loads the newest durable checkpoint. (The stand-in
    crash here cannot cross torch.save's C++ writer; crashes inside it are in the multi-rank tests.)"""
    root = str(tmp_path / "ckpt")
    state = TrainingState(SPEC, Topology(), 0)
    backend = ReferenceBackend(combination("LEGACY", "torch", "sync"))
    state.train(1)
    backend.save(state, root)
    snap = Snapshot.take(root, tmp_path / "snap")
    state.train(1)
    [fault] = faults_from([{"kind": "lost_unsynced_writes", "max_states": 16, **point}])

    try:
        with inject([fault], rank=0, oplog_dir=tmp_path / "ops", kill=_crash):
            backend.save(state, root)
    except Crashed:
        pass
    got = power_loss_states(fault, snap, tmp_path / "ops", tmp_path / "states")
    assert got.states and len(got.ops) == len(read_ops(tmp_path / "ops"))
    if not point:
        assert got.unsynced == [] and len(got.states) == 1  # the reference fsyncs everything it wrote
    for s in got.states:
        complete = [i.iteration for i in list_checkpoints(s.path) if i.complete]
        assert complete and max(complete) == newest, (s.how, complete)


def test_overwriting_a_checkpoint_by_exchange_never_loses_it(tmp_path):
    """Saving an iteration that exists swaps the new folder in atomically (RENAME_EXCHANGE): a power loss
    right after the swap leaves the old or the new copy, never neither."""
    root = str(tmp_path / "ckpt")
    state = TrainingState(SPEC, Topology(), 0)
    backend = ReferenceBackend(combination("LEGACY", "torch", "sync"))
    state.train(1)
    backend.save(state, root)
    snap = Snapshot.take(root, tmp_path / "snap")

    with pytest.raises(Crashed):
        with inject(
            faults_from([{"kind": "lost_unsynced_writes", "op": "exchange", "when": "after"}]),
            rank=0,
            oplog_dir=tmp_path / "ops",
            kill=_crash,
        ):
            backend.save(state, root)
    got = crash_states(snap, tmp_path / "ops", tmp_path / "states", max_states=16)
    assert any(o.op == "exchange" for o in got.ops) and got.unsynced
    for s in got.states:
        assert [i.iteration for i in list_checkpoints(s.path) if i.complete] == [1], s.how


def test_read_errors_reach_the_loader(tmp_path):
    (tmp_path / "f").write_bytes(b"x")
    with inject(faults_from([{"kind": "io_error", "errno": "EIO", "op": "read", "nth": 2}]), rank=0):
        storage.current().open_read(str(tmp_path / "f")).close()
        with pytest.raises(OSError, match="Input/output error"):
            storage.current().open_read(str(tmp_path / "f"))


def test_operations_that_fail_leave_no_record(tmp_path):
    """create and rename are recorded before they run (a kill in between must not leave a file the log
    never made); when the call itself fails, its record is cancelled."""
    root = tmp_path / "root"
    root.mkdir()
    with inject([], rank=0, oplog_dir=tmp_path / "ops"):
        fs = storage.current()
        with pytest.raises(OSError):
            fs.open_write(str(root / "missing" / "a"))
        with pytest.raises(OSError):
            fs.rename(str(root / "nothing"), str(root / "b"))
        with fs.open_write(str(root / "c"), sync=False) as f:
            f.write(b"c")
        fs.rename(str(root / "c"), str(root / "d"))
    assert [(o.op, os.path.basename(o.path)) for o in read_ops(tmp_path / "ops")] == [
        ("create", "c"),
        ("write", "c"),
        ("close", "c"),
        ("rename", "c"),
    ]


def test_writes_at_offsets_land_as_on_disk(tmp_path):
    """A state is built in memory and written once: a write past the end leaves zeros before it, a
    rewrite in the middle replaces bytes, a file of the snapshot opened for writing starts empty."""
    root = tmp_path / "root"
    root.mkdir()
    (root / "old").write_bytes(b"OLD CONTENT")
    snap = Snapshot.take(root, tmp_path / "snap")
    with inject([], rank=0, oplog_dir=tmp_path / "ops"):
        fs = storage.current()
        for name in ("new", "old"):
            with fs.open_write(str(root / name), sync=False) as f:
                f.write(b"head")
                f.seek(10)
                f.write(b"tail")
                f.seek(1)
                f.write(b"EA")
    got = crash_states(snap, tmp_path / "ops", tmp_path / "states", max_states=64, model="posix_minimum")
    everything = next(s for s in got.states if s.how == "every operation landed")
    assert contents(everything.path) == {"new": b"hEAd\0\0\0\0\0\0tail", "old": b"hEAd\0\0\0\0\0\0tail"}
    assert contents(everything.path) == contents(root)
