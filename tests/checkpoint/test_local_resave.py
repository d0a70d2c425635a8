"""LOCAL re-saves of one iteration on real ranks. A LOCAL save has no collective: when iteration N is saved
again and one rank dies mid-write, the others have already replaced their copy of N. The load must still
read one whole save on every rank (the first one, kept aside), never a mix of the two."""

import os
import shutil
import signal
import time

import pytest

from resilience.checkpoint import ReferenceBackend, commit, list_checkpoints
from resilience.checkpoint.inspect import inspect
from resilience.errors import RankFailure
from resilience.launch import run_ranks
from resilience.state import ModelSpec, Topology, TrainingState, fingerprint
from resilience.vocab import phases
from resilience.vocab.combos import Combination
from resilience.vocab.folders import iter_name

COMBO = Combination.parse("LOCAL/torch/sync")
TOPO = Topology(2, 1, 1)
SPEC = ModelSpec()
TIMEOUT = 60


def _state(ctx, *stamps) -> TrainingState:
    """Iteration 2, stamped by each save made so far (a stamp also draws the RNG, as a save does in a run)."""
    state = TrainingState(SPEC, TOPO, ctx.rank)
    state.train(2)
    for g in stamps:
        state.stamp(g)
    return state


def _wait_for(path: str) -> None:
    deadline = time.monotonic() + TIMEOUT
    while not os.path.exists(path):
        if time.monotonic() > deadline:
            raise TimeoutError(f"{path} never appeared")
        time.sleep(0.01)


def _job0(ctx, root: str, published: str):
    """Save iteration 2 (A) on both ranks, then save it again (B): rank 0 publishes B, then rank 1 is
    killed as it starts writing B."""
    state = _state(ctx, 1)
    backend = ReferenceBackend(COMBO)
    backend.save(state, root)
    state.stamp(2)
    if ctx.rank == 1:

        def die(phase, info):
            if phase == "write":
                _wait_for(published)
                os.kill(os.getpid(), signal.SIGKILL)

        phases.listen(die)
    backend.save(state, root)
    with open(published, "w"):
        pass
    return "saved"


def _load(ctx, backend, root):
    state = TrainingState(SPEC, TOPO, ctx.rank)
    result = backend.load(state, root)
    return {
        "iteration": result.iteration,
        "path": os.path.relpath(result.path, root),
        "warnings": result.warnings,
        "fp": fingerprint(state.sharded_state_dict()),
    }, state


def _job1(ctx, root: str):
    """Resume, then save iteration 2 again (C) with rank 0 failing and rank 1 publishing it."""
    backend = ReferenceBackend(COMBO)
    loaded, state = _load(ctx, backend, root)
    state.stamp(3)
    remove = phases.listen(lambda phase, info: _raise_on(ctx.rank == 0 and phase == "write"))
    try:
        backend.save(state, root)
        error = None
    except RankFailure as e:
        error = str(e)
    finally:
        remove()
    return {
        "load": loaded,
        "error": error,
        "expected": {
            g: fingerprint(_state(ctx, *gs).sharded_state_dict()) for g, gs in {"a": (1,), "b": (1, 2)}.items()
        },
    }


def _raise_on(condition: bool) -> None:
    if condition:
        raise OSError("injected: rank 0's save fails as it starts writing")


def _job2(ctx, root: str):
    """Resume, then save iteration 2 again (D) on every rank, and load it."""
    backend = ReferenceBackend(COMBO)
    first, state = _load(ctx, backend, root)
    state.stamp(4)
    backend.save(state, root)
    d = fingerprint(state.sharded_state_dict())
    second, _ = _load(ctx, ReferenceBackend(COMBO), root)
    return {"first": first, "second": second, "d": d}


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """The three jobs in turn, with a copy of the folder as each job left it."""
    base = tmp_path_factory.mktemp("local-resave")
    root = str(base / "ckpt")
    with pytest.raises(RankFailure) as killed:
        run_ranks(_job0, TOPO.world, args=(root, str(base / "published")), timeout=TIMEOUT)
    assert "signal 9" in killed.value.failures[1]
    copies = {"after-kill": shutil.copytree(root, base / "after-kill")}
    job1 = run_ranks(_job1, TOPO.world, args=(root,), timeout=TIMEOUT)
    copies["after-failed-resave"] = shutil.copytree(root, base / "after-failed-resave")
    job2 = run_ranks(_job2, TOPO.world, args=(root,), timeout=TIMEOUT)
    return {"job1": job1, "job2": job2, "copies": copies, "root": root}


@pytest.mark.multiprocess
def test_a_resave_killed_on_one_rank_after_another_published_loads_the_first_save_whole(runs):
    for rank, out in enumerate(runs["job1"]):
        a, b = out["expected"]["a"], out["expected"]["b"]
        assert a != b  # the two saves of iteration 2 differ on every rank
        assert out["load"]["iteration"] == 2
        assert out["load"]["fp"] == a, f"rank {rank} did not read the first save whole"
    rank0 = runs["job1"][0]["load"]
    assert rank0["path"].startswith("local/rank_00000/iter_0000002.replaced-"), rank0
    assert any("the latest save of iteration 2" in w for w in rank0["warnings"]), rank0["warnings"]


@pytest.mark.multiprocess
def test_saves_after_a_load_never_reuse_a_number_another_rank_holds(runs):
    # rank 0 holds B (save 2) of iteration 2, rank 1 now holds C: numbered 3, never 2, or B and C would pair
    assert runs["job1"][0]["error"] is not None and runs["job1"][1]["error"] is None
    for rank, out in enumerate(runs["job2"]):
        assert out["first"]["iteration"] == 2
        assert out["first"]["fp"] == runs["job1"][rank]["expected"]["a"], f"rank {rank} read a mix"


@pytest.mark.multiprocess
def test_a_resave_acknowledged_on_every_rank_is_what_loads(runs):
    for out in runs["job2"]:
        assert out["second"]["fp"] == out["d"]
        assert out["second"]["path"].endswith("/iter_0000002") and out["second"]["warnings"] == []


@pytest.mark.multiprocess
def test_inspect_and_listing_see_the_copy_every_rank_holds(runs):
    root = str(runs["copies"]["after-kill"])
    result = inspect(root)
    local = [c for c in result.checkpoints if c.layout == "local"]
    assert [c.iteration for c in local] == [2] and local[0].loadable, local
    paths = sorted(os.path.relpath(f.path, root) for f in local[0].folders)
    assert (
        paths[0].startswith("local/rank_00000/iter_0000002.replaced-") and paths[1] == "local/rank_00001/iter_0000002"
    )
    assert {f.save for f in local[0].folders} == {1}
    # the listing the newest-valid rule reads: both copies on rank 0 are iteration 2, complete
    listed = [(os.path.relpath(i.path, root).split("/")[1], i.iteration, i.complete) for i in list_checkpoints(root)]
    assert sorted(listed) == [("rank_00000", 2, True)] * 2 + [("rank_00001", 2, True)]


@pytest.mark.multiprocess
def test_inspect_reports_ranks_holding_different_saves(runs, tmp_path):
    root = str(shutil.copytree(runs["copies"]["after-kill"], tmp_path / "ckpt"))
    for _, path in commit.list_replaced(os.path.join(root, "local", "rank_00000")):
        shutil.rmtree(path)  # without the kept copy, rank 0 holds only B and rank 1 only A
    local = [c for c in inspect(root).checkpoints if c.layout == "local"]
    assert not local[0].loadable
    assert any(p.check == "ranks agree" and "different saves" in p.detail for p in local[0].problems), local[0]


# ---- commit helpers (one process, real folders) ---------------------------------------------------------
def _folder(path, text=""):
    os.makedirs(path)
    with open(os.path.join(path, "f"), "w") as f:
        f.write(text)


def test_publish_keeping_the_replaced_copy(tmp_path):
    final = str(tmp_path / iter_name(2))
    _folder(final, "a")
    _folder(str(tmp_path / ".staging-x"), "b")
    commit.publish(str(tmp_path / ".staging-x"), final, keep_replaced=True)
    assert open(os.path.join(final, "f")).read() == "b"
    [(iteration, kept)] = commit.list_replaced(str(tmp_path))
    assert iteration == 2 and open(os.path.join(kept, "f")).read() == "a"
    assert commit.list_iterations(str(tmp_path)) == [(2, final)]  # never taken for an iteration of its own


def test_retention_removes_replaced_copies_with_their_iteration(tmp_path):
    root = str(tmp_path)
    for name in [
        "iter_0000001",
        "iter_0000001.replaced-0123abcd",
        "iter_0000002",
        "iter_0000002.replaced-89abcdef",
        "iter_0000003",
    ]:
        _folder(os.path.join(root, name))
    commit.apply_retention(root, 2, 3)
    assert sorted(os.listdir(root)) == ["iter_0000002", "iter_0000002.replaced-89abcdef", "iter_0000003"]
    commit.apply_retention(root, 1, 3)
    assert sorted(os.listdir(root)) == ["iter_0000003"]
