"""resilience.dist: the collectives alone in one process, and across real rank processes."""

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
