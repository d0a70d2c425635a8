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
    [ModelSpec(), ModelSpec(dtype="bf16", optimizer="distributed"), ModelSpec(optimizer="distributed", vocab=37)],
    ids=["fp32-adam", "bf16-distopt", "fp32-distopt-vocab37"],
)
def test_same_fingerprint_on_different_topologies(spec):
    reference = _fingerprint(spec, Topology(1, 1, 1))
    for topo in (Topology(2, 2, 2), Topology(4, 1, 2), Topology(1, 4, 1), Topology(1, 1, 3)):
        assert _fingerprint(spec, topo) == reference, topo


def test_fingerprint_sees_one_more_step():
    spec = ModelSpec()
    assert _fingerprint(spec, Topology(2, 1, 1), steps=3) != _fingerprint(spec, Topology(2, 1, 1), steps=4)
