"""Every crash state obeys its persistence model: random operation logs through the real seam."""

import os
import tempfile

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from resilience import storage
from resilience.errors import ConfigError
from resilience.faults import Snapshot, crash_states, inject, read_ops
from resilience.faults.crash_states import _replay, _split
from resilience.faults.persistence import EXT4_ORDERED, POSIX_MINIMUM, persistence_model

DIRS = ("d1", "d2")
FILES = ("f1", "f2", "f3")
PLACES = ("",) + DIRS  # a file or folder lives at the root or in one of the folders


def _ops():
    where = st.sampled_from(PLACES)
    return st.lists(
        st.one_of(
            st.tuples(st.just("mkdir"), st.sampled_from(DIRS)),
            st.tuples(st.just("write"), where, st.sampled_from(FILES), st.integers(1, 3), st.booleans()),
            st.tuples(st.just("fsync_dir"), where),
            st.tuples(st.just("rename"), where, st.sampled_from(FILES), where, st.sampled_from(FILES)),
            st.tuples(st.just("rename_dir"), st.sampled_from(DIRS), st.sampled_from(DIRS)),
            st.tuples(st.just("unlink"), where, st.sampled_from(FILES)),
        ),
        min_size=1,
        max_size=14,
    )


def _run(root: str, ops: list) -> None:
    """Carry the operations out through the seam (failing ones leave no record); every written file
    holds a tag of its own, so a file seen at two paths in a state would show."""
    fs = storage.current()
    for n, op in enumerate(ops):
        try:
            if op[0] == "mkdir":
                fs.mkdir(os.path.join(root, op[1]))
            elif op[0] == "write":
                _, d, name, chunks, sync = op
                with fs.open_write(os.path.join(root, d, name), sync=False) as f:
                    for c in range(chunks):
                        f.write(f"<{n}.{c}>".encode())
                    if sync:
                        f.fsync()
            elif op[0] == "fsync_dir":
                fs.fsync_dir(os.path.join(root, op[1]))
            elif op[0] == "rename":
                fs.rename(os.path.join(root, op[1], op[2]), os.path.join(root, op[3], op[4]))
            elif op[0] == "rename_dir" and op[1] != op[2]:
                fs.rename(os.path.join(root, op[1]), os.path.join(root, op[2]))
            elif op[0] == "unlink":
                fs.unlink(os.path.join(root, op[1], op[2]))
        except OSError:
            pass


def _check_state(path: str) -> None:
    tags = []
    for dirpath, dirnames, files in os.walk(path):
        for d in dirnames:
            assert d in DIRS, f"{d} came back as a folder"
        for f in files:
            assert f in FILES, f"folder {f} came back as a file"
            with open(os.path.join(dirpath, f), "rb") as fh:
                data = fh.read()
            if data.startswith(b"<"):
                tags.append(data.split(b">")[0])
    assert len(tags) == len(set(tags)), f"one file at two paths (a rename that half landed): {tags}"


@pytest.mark.parametrize("model", [EXT4_ORDERED, POSIX_MINIMUM], ids=lambda m: m.name)
@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(ops=_ops(), seed=st.integers(0, 3))
def test_every_crash_state_obeys_the_model(model, ops, seed):
    with tempfile.TemporaryDirectory() as tmp:
        root = os.path.join(tmp, "root")
        os.makedirs(os.path.join(root, "d1"))
        with open(os.path.join(root, "f1"), "wb") as f:
            f.write(b"old")
        snap = Snapshot.take(root, os.path.join(tmp, "snap"))
        with inject([], rank=0, oplog_dir=os.path.join(tmp, "ops")):
            _run(root, ops)
        got = crash_states(
            snap, os.path.join(tmp, "ops"), os.path.join(tmp, "states"), max_states=10, seed=seed, model=model
        )
        assert got.model == model.name and got.states
        logged = [
            o
            for o in read_ops(os.path.join(tmp, "ops"))
            if _split(root, o.path) is not None or (o.dst and _split(root, o.dst) is not None)
        ]
        _, steps, _ = _replay(snap, logged)
        durable = model.durable(steps)
        for state in got.states:
            landed = frozenset(state.persisted)
            assert not any(durable[k] for k in landed)
            assert model.obeys(steps, durable, landed), (state.how, sorted(landed))
            _check_state(state.path)


def _entries(make_ops, model, tmp):
    root = os.path.join(tmp, "root")
    os.makedirs(root)
    ops = make_ops(root)
    snap = Snapshot.take(root, os.path.join(tmp, "snap"))
    with inject([], rank=0, oplog_dir=os.path.join(tmp, "ops")):
        ops()
    got = crash_states(snap, os.path.join(tmp, "ops"), os.path.join(tmp, "states"), max_states=64, model=model)
    return {
        frozenset(os.path.relpath(os.path.join(d, n), s.path) for d, ds, fs in os.walk(s.path) for n in ds + fs)
        for s in got.states
    }


def test_ext4_lands_entries_in_order_and_posix_in_any_order(tmp_path):
    """mkdir a, mkdir b, no fsync: ext4's journal keeps {}, {a}, {a, b}; POSIX also {b}."""

    def make_ops(root):
        def ops():
            storage.current().mkdir(os.path.join(root, "a"))
            storage.current().mkdir(os.path.join(root, "b"))

        return ops

    ext4 = _entries(make_ops, "ext4_ordered", str(tmp_path / "e"))
    posix = _entries(make_ops, "posix_minimum", str(tmp_path / "p"))
    assert ext4 == {frozenset(), frozenset({"a"}), frozenset({"a", "b"})}
    assert posix == ext4 | {frozenset({"b"})}


def test_an_empty_new_folder_stays_a_folder(tmp_path):
    root = str(tmp_path / "root")
    os.makedirs(root)
    snap = Snapshot.take(root, tmp_path / "snap")
    with inject([], rank=0, oplog_dir=tmp_path / "ops"):
        storage.current().mkdir(os.path.join(root, "iter_1"))
        storage.current().fsync_dir(root)
    got = crash_states(snap, tmp_path / "ops", tmp_path / "states", model="posix_minimum")
    assert [os.path.isdir(os.path.join(s.path, "iter_1")) for s in got.states] == [True]


def test_unknown_model_is_a_clear_error():
    with pytest.raises(ConfigError, match="unknown persistence model 'xfs'.*ext4_ordered"):
        persistence_model("xfs")
