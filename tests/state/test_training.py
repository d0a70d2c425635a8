"""Training is topology-invariant: real multi-rank runs give bit-identical global state."""

import pytest

from resilience.launch import run_ranks
from resilience.state import ModelSpec, Topology
from resilience.state.demo import train_and_fingerprint

pytestmark = pytest.mark.multiprocess


def _fingerprint(spec, topo, steps=3):
    return run_ranks(train_and_fingerprint, topo.world, args=(spec, topo, steps), timeout=120)[0]["fingerprint"]


@pytest.mark.parametrize(
    "spec",
    [
        ModelSpec(),
        ModelSpec(dtype="bf16", optimizer="distributed"),
        ModelSpec(optimizer="distributed", vocab=37),
        # a parameter of one row and one of two: the distributed optimizer's shards of them empty on some ranks
        ModelSpec(optimizer="distributed", sized_params={"one_row": 1, "two_rows": 2, "past_4k": 1025}),
        ModelSpec(optimizer="distributed", num_experts=4, shared_experts=True),
    ],
    ids=["fp32-adam", "bf16-distopt", "fp32-distopt-vocab37", "distopt-sized-params", "distopt-experts"],
)
def test_same_fingerprint_on_different_topologies(spec):
    reference = _fingerprint(spec, Topology(1, 1, 1))
    topos = [Topology(2, 2, 2), Topology(4, 1, 2), Topology(1, 4, 1), Topology(1, 1, 3)]
    if spec.num_experts:  # experts regrouped over ep and split over etp
        topos += [Topology.parse(t) for t in ("tp2pp2dp2ep2etp2", "tp1pp2dp4ep4", "tp2pp1dp3ep2")]
    for topo in topos:
        assert _fingerprint(spec, topo) == reference, topo


def test_the_loss_scale_is_a_tensor_of_no_dimensions_that_training_moves():
    """Dynamic loss scaling's scale: halved on each skipped iteration, doubled every 4 updates, saved as a
    0-dim tensor every rank holds alike (rank 0's copy written)."""
    from resilience.state import ParallelGroups, ShardedTensor, TrainingState
    from resilience.state.training import GRAD_SCALE_KEY, GRAD_SCALE_START

    spec = ModelSpec(skip_every=2)
    state = TrainingState(spec, Topology(), 0, groups=ParallelGroups.without_collectives())
    skipped = sum(spec.is_skipped(i) for i in range(1, 9))
    state.train(8)
    assert 0 < skipped < 8
    assert float(state.grad_scale) == GRAD_SCALE_START * 0.5**skipped * 2.0 ** (state.opt_step // 4)
    (record,) = [r for r in state.sharded_state_dict() if r.key == GRAD_SCALE_KEY]
    assert isinstance(record, ShardedTensor) and record.data.dim() == 0 and record.global_shape == ()


def test_fingerprint_sees_one_more_step():
    spec = ModelSpec()
    assert _fingerprint(spec, Topology(2, 1, 1), steps=3) != _fingerprint(spec, Topology(2, 1, 1), steps=4)


def _fingerprint_with_replica_flipped(ctx, spec, topo, flip_rank):
    """Train one step, then change one element of one tensor replica on `flip_rank` (replica id != 0)."""
    import torch

    from resilience.state import TOPOLOGY_BOUND_KEYS, ShardedTensor, TrainingState
    from resilience.state.fingerprints import combine, fingerprint

    state = TrainingState(spec, topo, ctx.rank)
    state.train(1)
    records = state.sharded_state_dict()
    if ctx.rank == flip_rank:
        replica = next(r for r in records if isinstance(r, ShardedTensor) and r.replica_id != 0)
        with torch.no_grad():
            replica.data.view(-1)[0] += 1.0
    digests = fingerprint(records)
    return {"fingerprint": combine(digests, TOPOLOGY_BOUND_KEYS), "digests": digests} if ctx.rank == 0 else None


def test_a_replica_that_differs_from_replica_0_changes_the_fingerprint():
    """A dp rank that loaded a damaged copy of a parameter holds a state no save wrote, though only
    replica 0 enters the global values: the fingerprint shows it, on the key that differs only."""
    spec, topo = ModelSpec(), Topology(1, 1, 2)
    clean = run_ranks(_fingerprint_with_replica_flipped, 2, args=(spec, topo, None), timeout=120)[0]
    assert clean["fingerprint"] == _fingerprint(spec, Topology(1, 1, 1), steps=1)
    flipped = run_ranks(_fingerprint_with_replica_flipped, 2, args=(spec, topo, 1), timeout=120)[0]
    changed = [k for k in clean["digests"] if clean["digests"][k] != flipped["digests"][k]]
    assert len(changed) == 1 and flipped["fingerprint"] != clean["fingerprint"]


def test_padding_rows_with_values_train_alike_on_every_layout_of_one_padded_vocabulary():
    spec = ModelSpec(vocab=101, make_vocab_size_divisible_by=5, padding_values=True, optimizer="distributed")
    on_tp2 = _fingerprint(spec, Topology(2, 1, 2))
    assert on_tp2 == _fingerprint(spec.whole_on_one_rank(2), Topology(1, 1, 1))  # 110 rows both, padding trained
    assert on_tp2 == _fingerprint(spec, Topology(2, 2, 1))
    assert on_tp2 != _fingerprint(spec, Topology(1, 1, 1))  # 105 rows: another state
    assert spec.whole_on_one_rank(1) == spec and ModelSpec().whole_on_one_rank(4) == ModelSpec()


class _CheckingGuard:
    """An async save's write guard that checks the step's announcements: a tensor is announced while it still
    holds the value the save saw, and every tensor the step changed was announced."""

    def __init__(self, records):
        from resilience.checkpoint.staging import storage_key

        self.key = storage_key
        self.saved = [(r.data, r.data.clone()) for r in records if hasattr(r, "data")]
        self.announced: set[int] = set()

    def before_write(self, tensors) -> None:
        new = {self.key(t) for t in tensors} - self.announced
        for live, saved in self.saved:
            if self.key(live) in new:
                assert live.equal(saved), "a tensor changed before the step announced it"
        self.announced |= new

    def unannounced_changes(self) -> int:
        return sum(1 for live, saved in self.saved if not live.equal(saved) and self.key(live) not in self.announced)


@pytest.mark.parametrize("spec", [ModelSpec(), ModelSpec(dtype="bf16", optimizer="distributed", skip_every=3)])
def test_a_step_announces_every_tensor_before_it_changes_it(spec):
    """The step tells an async save's guard about a tensor before its first write to it (the copy must
    exist by then) and only then; a change it never announced would reach the snapshot."""
    from resilience.state import ParallelGroups, TrainingState

    state = TrainingState(spec, Topology(), 0, groups=ParallelGroups.without_collectives())
    state.train(1)
    for _ in range(3):  # a skipped iteration changes the loss scale alone
        guard = _CheckingGuard(state.sharded_state_dict())
        state.write_guard = guard
        state.step()
        state.stamp(state.iteration)
        assert guard.announced and guard.unannounced_changes() == 0
        state.write_guard = None


@pytest.mark.parametrize("spec", [ModelSpec(), ModelSpec(dtype="bf16", optimizer="distributed", vocab=37)])
def test_the_step_in_runs_of_pieces_gives_the_state_of_one_pass(spec, monkeypatch):
    """The step's arithmetic in runs of a few pieces (and a piece larger than a run alone) is the arithmetic
    of one pass over every piece, bit for bit."""
    from resilience.state import ParallelGroups, TrainingState, training
    from resilience.state.fingerprints import fingerprint

    def trained():
        state = TrainingState(spec, Topology(), 0, groups=ParallelGroups.without_collectives())
        state.train(4)
        return fingerprint(state.sharded_state_dict())

    one_pass = trained()
    monkeypatch.setattr(training, "STEP_RUN", 1000)  # smaller than most pieces of these models
    assert training._spans([600, 300, 5000, 10, 10]) == [(0, 2, 0, 900), (2, 3, 900, 5000), (3, 5, 5900, 20)]
    assert trained() == one_pass
