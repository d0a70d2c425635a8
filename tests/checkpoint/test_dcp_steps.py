"""checkpoint.formats.dcp_steps: DCP's save and load run step by step, on real ranks: what one rank's
failure does to every rank, and a load of each rank's part of the metadata."""

import pytest
import torch
from torch.distributed.checkpoint import FileSystemReader, FileSystemWriter
from torch.distributed.checkpoint.default_planner import DefaultLoadPlanner, DefaultSavePlanner

from resilience import dist
from resilience.checkpoint.formats import dcp_steps
from resilience.errors import RankFailure
from resilience.launch import run_ranks


class _PlanFails(DefaultSavePlanner):
    def create_local_plan(self):
        if dist.this_rank() == 1:
            raise ValueError("no plan on rank 1")
        return super().create_local_plan()


class _WriteFails(FileSystemWriter):
    def write_data(self, plan, planner):
        if dist.this_rank() == 1:
            raise OSError("disk gone on rank 1")
        return super().write_data(plan, planner)


def _outcome(fn):
    try:
        fn()
    except RankFailure as e:
        return e.what, e.failures
    return "ok", {}


def _steps(ctx, folder):
    state = {"x": torch.arange(6.0)}  # written by the coordinator (DCP's default planner)
    out = {
        "plan": _outcome(lambda: dcp_steps.save(state, FileSystemWriter(f"{folder}/a"), _PlanFails(), what="save a")),
        "write": _outcome(
            lambda: dcp_steps.save(state, _WriteFails(f"{folder}/b"), DefaultSavePlanner(), what="save b")
        ),
        "saved": _outcome(lambda: dcp_steps.save(state, FileSystemWriter(f"{folder}/c"), DefaultSavePlanner())),
    }
    into = {"x": torch.zeros(6)}
    out["loaded"] = _outcome(
        lambda: dcp_steps.load(into, FileSystemReader(f"{folder}/c"), DefaultLoadPlanner(), keys=["x"])
    )
    out["x"] = into["x"].tolist()
    missing = {"x": torch.zeros(6), "y": torch.zeros(1)}  # a key the checkpoint lacks: the planner's error
    out["missing"] = _outcome(
        lambda: dcp_steps.load(missing, FileSystemReader(f"{folder}/c"), DefaultLoadPlanner(), keys=list(missing))
    )
    out["no metadata"] = _outcome(
        lambda: dcp_steps.load(dict(into), FileSystemReader(f"{folder}/a"), DefaultLoadPlanner(), keys=["x"])
    )
    return out


@pytest.mark.multiprocess
def test_one_rank_s_failure_raises_on_every_rank_naming_it_and_a_save_loads_back(tmp_path):
    results = run_ranks(_steps, 2, args=(str(tmp_path),), timeout=120)
    for r in results:
        what, failures = r["plan"]
        assert what == "save a: plan" and list(failures) == [1] and "no plan on rank 1" in failures[1]
        what, failures = r["write"]
        assert what == "save b: write" and list(failures) == [1] and "disk gone on rank 1" in failures[1]
        assert r["saved"] == ("ok", {}) and r["loaded"] == ("ok", {})
        assert r["x"] == [0.0, 1.0, 2.0, 3.0, 4.0, 5.0]
        assert r["missing"][0] == "load: plan" and sorted(r["missing"][1]) == [0, 1]
        what, failures = r["no metadata"]  # read once, by the coordinator: named once, on every rank
        assert what == "load: metadata" and list(failures) == [0]
    assert not (tmp_path / "a" / ".metadata").exists() and not (tmp_path / "b" / ".metadata").exists()
