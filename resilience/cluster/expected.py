"""Fingerprints of training that never stopped, computed by one process inside a running process group.

runner.expected.NeverStopped builds its state with process groups and fingerprints collectively; one rank
of a live group must not (a new_group on one rank alone hangs every other), so this one uses no group."""
from __future__ import annotations

from types import SimpleNamespace

from ..state import RUN_BOUND_KEYS, ModelSpec, Topology, TrainingState, combine
from ..state.fingerprint import assemble, local_pieces

_NO_GROUPS = SimpleNamespace(dp_group=None, dp_ranks=[0])


def local_fingerprint(state: TrainingState) -> dict[str, str]:
    """{key: digest} of a state held whole by this process (no collective)."""
    return assemble(local_pieces(state.sharded_state_dict()))


class NeverStoppedLocal:
    """iteration -> fingerprint of a tp1pp1dp1 run from scratch (topology-invariant, so valid for every
    topology). Steps forward incrementally; caches every answer."""

    def __init__(self, spec: ModelSpec):
        self.spec = spec
        self._state: TrainingState | None = None
        self._cache: dict[int, str] = {}

    def __call__(self, iteration: int) -> str:
        if iteration not in self._cache:
            if self._state is None or self._state.iteration > iteration:
                self._state = TrainingState(self.spec, Topology(1, 1, 1), 0, groups=_NO_GROUPS)  # type: ignore[arg-type]  # no process group here
            while self._state.iteration < iteration:
                self._state.step()
            self._cache[iteration] = combine(local_fingerprint(self._state), RUN_BOUND_KEYS)
        return self._cache[iteration]
