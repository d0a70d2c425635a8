"""Assembling the global tensors and reading the save generations from pieces, on hand-made pieces."""

import pytest
import torch

from resilience.launch import run_ranks
from resilience.launch.outcomes import RankContext
from resilience.state import ModelSpec, Topology
from resilience.state.fingerprints import assemble_tensors, generations

PREFIX = "optimizer.generation."


def test_a_piece_that_covers_its_key_is_never_written_into():
    whole = torch.arange(6, dtype=torch.float32).reshape(2, 3)
    other = torch.full((1, 3), 9.0)
    pieces = [("t", "k", (2, 3), (0, 0), whole), ("t", "k", (2, 3), (1, 0), other), ("o", "x", (1,), (0,), 5)]
    full = assemble_tensors(pieces)["k"]
    assert torch.equal(full, torch.tensor([[0.0, 1.0, 2.0], [9.0, 9.0, 9.0]]))
    assert torch.equal(whole, torch.arange(6, dtype=torch.float32).reshape(2, 3))


def test_pieces_are_placed_at_their_offsets():
    pieces = [("t", "k", (2, 4), (0, 2), torch.ones(2, 2)), ("t", "k", (2, 4), (1, 0), torch.full((1, 2), 3.0))]
    assert torch.equal(assemble_tensors(pieces)["k"], torch.tensor([[0.0, 0.0, 1.0, 1.0], [3.0, 3.0, 1.0, 1.0]]))


def _stamps(t: torch.Tensor, offset=(0, 0)):
    return [("t", PREFIX + "w", tuple(t.shape), offset, t)]


def test_one_generation_everywhere_and_a_mix():
    one = {"w": {7: {"elements": 12, "box": [[0, 3], [0, 4]]}}}
    assert generations(_stamps(torch.full((3, 4), 7.0)), PREFIX) == one
    not_whole = {"w": {-1: {"elements": 4, "box": [[0, 2], [0, 2]]}}}  # no save writes a fraction
    assert generations(_stamps(torch.full((2, 2), 0.5)), PREFIX) == not_whole
    mixed = torch.full((3, 4), 7.0)
    mixed[1:, 2:] = 8.0
    assert generations(_stamps(mixed), PREFIX) == {
        "w": {7: {"elements": 8, "box": [[0, 3], [0, 4]]}, 8: {"elements": 4, "box": [[1, 3], [2, 4]]}}
    }


def _both_ways(ctx, spec, topo):
    """The fingerprint gathered to rank 0 (its own pieces kept in place) and all-gathered (every rank's
    pieces sent), after two steps and a stamp."""
    from resilience.state import TrainingState
    from resilience.state.fingerprints import fingerprint, gather_pieces

    state = TrainingState(spec, topo, ctx.rank)
    state.train(2)
    state.stamp(5)
    to_rank0 = fingerprint(state.sharded_state_dict(), dst=0)
    everywhere = fingerprint(state.sharded_state_dict())
    pieces = gather_pieces(state.sharded_state_dict(), dst=0)
    found = generations(pieces, PREFIX) if pieces is not None else None
    return (to_rank0, everywhere, found) if ctx.rank == 0 else None


@pytest.mark.multiprocess
def test_gathered_to_one_rank_or_to_all_the_fingerprint_is_the_same():
    spec = ModelSpec(optimizer="distributed", vocab=37)  # vocab padding, and replicas on dp 2
    to_rank0, everywhere, found = run_ranks(_both_ways, 4, args=(spec, Topology(2, 1, 2)), timeout=120)[0]
    alone, _, found_alone = _both_ways(RankContext(0, 1, 0), spec, Topology(1, 1, 1))
    assert to_rank0 == everywhere
    assert {k: d for k, d in alone.items() if k != "rng"} == {k: d for k, d in to_rank0.items() if k != "rng"}
    assert found == found_alone and all(list(g) == [5] for g in found.values())
