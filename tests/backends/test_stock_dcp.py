"""The stock DCP adapter: DCP's own file operations reach the storage seam unchanged (what the fault
injector and the power-loss recorder see), and the adapter runs through the matrix."""

from __future__ import annotations

import os

import pytest
import torch
import torch.distributed.checkpoint as dcp

from resilience import storage
from resilience.backends.dcp_observation import reader, writer
from resilience.backends.stock_dcp import StockDcpBackend, find_load_step
from resilience.runner.matrix import fault_scenario, transition_scenario
from resilience.runner.run import run_case
from resilience.vocab import Combination


class _Stream:
    def __init__(self, log, inner):
        self.log, self.inner = log, inner

    def write(self, data):
        self.log.append(("write", os.path.basename(self.inner.path), len(memoryview(data))))
        return self.inner.write(data)

    def fsync(self):
        self.log.append(("fsync", os.path.basename(self.inner.path)))
        return self.inner.fsync()

    def __getattr__(self, name):
        return getattr(self.inner, name)


class RecordingFS:
    """Logs what DCP asks the seam to do."""

    def __init__(self):
        self.inner = storage.LocalFileSystem()
        self.log: list[tuple] = []

    def open_write(self, path, *, sync=True):
        self.log.append(("create", os.path.basename(path), sync))
        return _Stream(self.log, self.inner.open_write(path, sync=sync))

    def rename(self, src, dst):
        self.log.append(("rename", os.path.basename(src), os.path.basename(dst)))
        return self.inner.rename(src, dst)

    def fsync_dir(self, path):
        self.log.append(("fsync_dir", path))
        return self.inner.fsync_dir(path)

    def __getattr__(self, name):
        return getattr(self.inner, name)


def _ops(log, name):
    return [op for op in log if op[1] == name]


def test_dcp_file_operations_reach_the_seam_unchanged(tmp_path):
    fs = RecordingFS()
    state = {"w": torch.arange(4096, dtype=torch.float32), "step": 7}
    with storage.use(fs):
        dcp.save(state, storage_writer=writer(str(tmp_path / "step-7")), no_dist=True)
    log = fs.log
    # every file opened without an fsync of the seam's own: DCP decides
    assert all(op[2] is False for op in log if op[0] == "create")
    data = _ops(log, "__0_0.distcp")
    assert data[-1][0] == "fsync" and any(op[0] == "write" for op in data)  # sync_files=True: data, then fsync
    meta = _ops(log, ".metadata.tmp")
    kinds = [op[0] for op in meta]
    if torch.__version__.startswith("2.13"):
        # 2.13 fsyncs .metadata.tmp before Python flushes its buffer: the bytes arrive after the fsync
        assert kinds.index("fsync") < kinds.index("write"), kinds
    assert ("rename", ".metadata.tmp", ".metadata") in log
    assert not [op for op in log if op[0] == "fsync_dir"]  # DCP never fsyncs a folder
    out = {"w": torch.zeros(4096), "step": 0}
    dcp.load(out, storage_reader=reader(str(tmp_path / "step-7")), no_dist=True)
    assert torch.equal(out["w"], state["w"]) and out["step"] == 7


def test_find_load_step_is_torchtitans_rule(tmp_path):
    for step, complete in ((2, True), (3, True), (4, False)):
        folder = tmp_path / f"step-{step}"
        folder.mkdir()
        if complete:
            (folder / ".metadata").write_bytes(b"x")
    (tmp_path / "step-9").write_bytes(b"a file, not a folder")
    assert find_load_step(str(tmp_path)) == 3
    listed = StockDcpBackend(Combination.parse("TORCH_DCP/torch_dcp/sync")).list_checkpoints(str(tmp_path))
    assert [(c.iteration, c.complete) for c in listed] == [(4, False), (3, True), (2, True)]


@pytest.mark.multiprocess
@pytest.mark.parametrize("combo", ["TORCH_DCP/torch_dcp/sync", "TORCH_DCP/torch_dcp/async"])
@pytest.mark.parametrize("backend", ["dcp", "dcp-threads"])
def test_resharding_round_trip(tmp_path, combo, backend):
    """tp2pp2dp1 -> tp1pp2dp2: model, distributed optimizer and padded vocabulary come back exact."""
    c = Combination.parse(combo)
    result = run_case(transition_scenario("tp+pp+dp", "tp2pp2dp1->tp1pp2dp2", 0), c, str(tmp_path), backend=backend)
    assert result.verdict == "PASS", result.detail


@pytest.mark.multiprocess
def test_a_failed_write_is_not_acknowledged(tmp_path):
    """Disk full on rank 1 during the second save: DCP raises on every rank, nothing is acknowledged, and
    the same job saves again and loads it back. What DCP raised is a CheckpointException, which derives
    from BaseException only: the adapter translates it, but the exception contract sees it."""
    result = run_case(
        fault_scenario("io_error", 0), Combination.parse("TORCH_DCP/torch_dcp/sync"), str(tmp_path), backend="dcp"
    )
    by = {v.checker: v for v in result.verdicts}
    assert [c for c, v in by.items() if v.status == "FAIL"] == ["exceptions"], result.detail
    assert "from the library's CheckpointException" in by["exceptions"].detail
    assert by["durability"].status == by["recovery"].status == "PASS"
