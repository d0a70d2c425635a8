"""Copy-before-write staging: whichever thread reaches a tensor first copies it, and the snapshot holds
the values of the moment save() was called, however training and the writer interleave."""

import os
import subprocess
import sys
import threading

import pytest
import torch

from resilience.checkpoint.staging import StagedCopy
from resilience.state.sharding import ShardedObject, ShardedTensor


def _records(n=6, size=1000):
    tensors = [torch.arange(size, dtype=torch.float32) + i for i in range(n)]
    records = [ShardedTensor(f"t{i}", t, (size,), (0,), 0) for i, t in enumerate(tensors)]
    records.append(ShardedObject("rng", torch.tensor([1, 2, 3]), replica_id=0))
    return tensors, records


def _staged(snapshot):
    return {r.key: (r.data if isinstance(r, ShardedTensor) else r.value).clone() for r in snapshot.copy_all()}


def test_training_copies_what_it_changes_before_the_writer_gets_there():
    tensors, records = _records()
    before = [t.clone() for t in tensors]
    snap = StagedCopy(records)
    snap.before_write([tensors[2], tensors[4][10:20]])  # a view counts for its whole tensor
    tensors[2].fill_(-1)
    tensors[4].fill_(-1)
    records[-1].value.fill_(0)  # objects were copied at save()
    staged = _staged(snap)
    for i, t in enumerate(before):
        assert torch.equal(staged[f"t{i}"], t)
    assert staged["rng"].tolist() == [1, 2, 3]


def test_a_write_after_the_writer_copied_does_not_reach_the_snapshot():
    tensors, records = _records()
    before = [t.clone() for t in tensors]
    snap = StagedCopy(records)
    snap.copy_all()
    snap.before_write(tensors)  # all copied already: returns at once
    for t in tensors:
        t.fill_(-1)
    buffers = {r.key: r.data for r in snap.records if isinstance(r, ShardedTensor)}  # what the writer writes
    for i, t in enumerate(before):
        assert torch.equal(buffers[f"t{i}"], t)


def test_training_and_writer_racing_give_the_values_of_the_save():
    for _ in range(20):
        tensors, records = _records(n=40, size=20000)
        before = [t.clone() for t in tensors]
        snap = StagedCopy(records)
        box = {}
        writer = threading.Thread(target=lambda: box.update(staged=_staged(snap)))  # noqa: B023 (joined below)
        writer.start()
        for t in reversed(tensors):  # training walks the other way: both threads meet in the middle
            snap.before_write([t])
            t.mul_(-3)
        writer.join()
        for i, t in enumerate(before):
            assert torch.equal(box["staged"][f"t{i}"], t)


def test_buffers_are_reused_when_shapes_match_and_dropped_when_keys_go():
    tensors, records = _records(n=3)
    buffers = {}
    first = StagedCopy(records, buffers).copy_all()
    kept = {k: v.data_ptr() for k, v in buffers.items()}
    second = StagedCopy(records[:2], buffers).copy_all()
    assert {k: v.data_ptr() for k, v in buffers.items()} == {k: kept[k] for k in ("t0", "t1")}
    assert second[0].data.data_ptr() == first[0].data.data_ptr()


def test_a_failed_copy_fails_the_snapshot_and_wakes_the_other_thread():
    tensors, records = _records(n=2)
    snap = StagedCopy(records)
    snap._copies[1] = (torch.zeros(3), snap._copies[1][1])  # a shape the buffer cannot take
    with pytest.raises(RuntimeError):
        snap.before_write([tensors[1]])
    with pytest.raises(RuntimeError, match="staging copy failed"):
        snap.copy_all()


def test_an_async_backend_releases_its_staging_copies_and_makes_them_again(tmp_path):
    from resilience.checkpoint.reference import ReferenceBackend
    from resilience.state import ModelSpec, ParallelGroups, Topology, TrainingState
    from resilience.vocab import Combination

    state = TrainingState(ModelSpec(), Topology(), 0, groups=ParallelGroups.without_collectives())
    backend = ReferenceBackend(Combination.parse("GLOBAL/torch_dist/async"))
    backend.save(state, str(tmp_path))
    backend.release_staging()  # finalizes the save in flight first
    assert not backend.in_flight and not backend._staging_buffers
    state.train(1)
    backend.save(state, str(tmp_path))
    assert backend._staging_buffers  # made again for this save
    backend.finalize()
    assert (
        backend.load(
            TrainingState(ModelSpec(), Topology(), 0, groups=ParallelGroups.without_collectives()), str(tmp_path)
        ).iteration
        == 1
    )


_FREED_COPIES = """
import psutil, torch
from resilience.checkpoint.staging import StagedCopy, return_freed_memory
from resilience.state.sharding import ShardedTensor

def resident():
    return psutil.Process().memory_info().rss

records = [ShardedTensor(f"t{i}", torch.ones(1 << 18), (1 << 18,), (0,), 0) for i in range(256)]
buffers = {}
before = resident()
StagedCopy(records, buffers).copy_all()
staged = resident() - before
buffers.clear()
return_freed_memory()
print(staged >> 20, (resident() - before) >> 20)
"""


def test_freed_staging_copies_leave_the_processs_memory():
    # a process of its own, with glibc's heap as a long-running rank's ends up: copies under the mmap
    # threshold (which glibc raises as large tensors are freed) come from the heap, and free() gives back
    # only what lies at its top (fixed here, so that the outcome does not depend on the heap's layout)
    env = {**os.environ, "MALLOC_MMAP_THRESHOLD_": str(32 << 20), "MALLOC_TRIM_THRESHOLD_": str(1 << 40)}
    out = subprocess.run([sys.executable, "-c", _FREED_COPIES], capture_output=True, text=True, timeout=120, env=env)
    assert out.returncode == 0, out.stderr
    staged, left = map(int, out.stdout.split())
    assert staged > 200  # MiB of copies made...
    assert left < staged // 4  # ...and no longer resident once freed
