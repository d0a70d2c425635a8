"""resilience.dist: the collectives alone in one process, and across real rank processes."""

import os
import pickle

import pytest

from resilience import dist
from resilience.launch import run_ranks


def test_alone_each_collective_is_what_one_process_sees():
    assert (dist.is_distributed(), dist.this_rank(), dist.world_size()) == (False, 0, 1)
    dist.barrier()
    assert dist.all_gather({"a": 1}) == [{"a": 1}]
    assert dist.broadcast("x") == "x"
    assert dist.all_agree(True) is True and dist.all_agree(False) is False
    assert dist.gather_failures(None) == {} and dist.gather_failures("boom") == {0: "boom"}


# an object whose pickle fills the first collective exactly (its size takes 8 bytes of it)
_FILLS_ONE = b"y" * (dist.INLINE_BYTES - 8 - (len(pickle.dumps(b"y" * 1000)) - 1000))


def _collectives(ctx):
    rank = dist.this_rank()
    dist.barrier()
    return {
        "rank": (rank, dist.world_size()),
        "gathered": dist.all_gather(rank * 10),
        "broadcast": dist.broadcast(f"from {rank}" if rank == 0 else None),
        # past what one collective carries: the rest in a second; from another rank than 0
        "large": dist.broadcast(("x" * dist.INLINE_BYTES, rank) if rank == 1 else None, src=1),
        "exact": dist.broadcast(_FILLS_ONE if rank == 0 else None),
        "all": dist.all_agree(True),
        "one_false": dist.all_agree(rank != 1),
        "failures": dist.gather_failures("boom" if rank == 2 else None),
    }


@pytest.mark.multiprocess
def test_across_ranks_every_rank_gets_the_same_answer():
    results = run_ranks(_collectives, 3, timeout=60)
    assert [r["rank"] for r in results] == [(0, 3), (1, 3), (2, 3)]
    for r in results:
        assert r["gathered"] == [0, 10, 20]
        assert r["broadcast"] == "from 0"
        assert r["large"] == ("x" * dist.INLINE_BYTES, 1)
        assert r["exact"] == _FILLS_ONE
        assert r["all"] is True and r["one_false"] is False
        assert r["failures"] == {2: "boom"}


def _to_first(ctx):
    rank = dist.this_rank()
    shared = {"same": "for every rank"}
    return {
        # sizes differ by rank: each is cut back to its own
        "gathered": dist.gather("x" * (rank * 1000)),
        "scattered": dist.scatter([f"to {r}" * (r + 1) for r in range(3)] if rank == 0 else None),
        "shared": dist.scatter([shared, shared, "one of its own"] if rank == 0 else None),
        "lazy": dist.all_gather(rank),  # the job's group connected pairs on first use (dist.lazy_gloo)
    }


@pytest.mark.multiprocess
def test_gather_reaches_the_first_rank_only_and_scatter_gives_each_rank_its_own():
    results = run_ranks(_to_first, 3, timeout=60)
    assert results[0]["gathered"] == ["", "x" * 1000, "x" * 2000]
    assert [r["gathered"] for r in results[1:]] == [None, None]
    assert [r["scattered"] for r in results] == ["to 0", "to 1to 1", "to 2to 2to 2"]
    assert [r["shared"] for r in results] == [{"same": "for every rank"}] * 2 + ["one of its own"]
    assert all(r["lazy"] == [0, 1, 2] for r in results)


def test_alone_gather_and_scatter_are_the_process_s_own():
    assert dist.gather("a") == ["a"] and dist.scatter(["b"]) == "b"


def test_lazy_gloo_sets_the_variable_inside_only_and_keeps_one_already_set(monkeypatch):
    monkeypatch.delenv("TORCH_GLOO_LAZY_INIT", raising=False)
    with dist.lazy_gloo():
        assert os.environ["TORCH_GLOO_LAZY_INIT"] == "1"
    assert "TORCH_GLOO_LAZY_INIT" not in os.environ  # a backend's own groups and processes connect eagerly
    monkeypatch.setenv("TORCH_GLOO_LAZY_INIT", "0")
    with dist.lazy_gloo():
        assert os.environ["TORCH_GLOO_LAZY_INIT"] == "0"  # the user's choice wins
    assert os.environ["TORCH_GLOO_LAZY_INIT"] == "0"
