"""Fingerprints of training that never stopped, computed in this process on one rank.
The training step is topology-invariant, so these hold for every topology."""
from __future__ import annotations

from functools import lru_cache

from ..state import RUN_BOUND_KEYS, ModelSpec, Topology, TrainingState, combine, fingerprint


class NeverStopped:
    def __init__(self, spec: ModelSpec):
        self.spec = spec
        self._state: TrainingState | None = None
        self._cache: dict[int, str] = {}

    def __call__(self, iteration: int) -> str:
        if iteration not in self._cache:
            if self._state is None or self._state.iteration > iteration:
                self._state = TrainingState(self.spec, Topology(1, 1, 1), 0)
            while self._state.iteration < iteration:
                self._state.step()
            self._cache[iteration] = combine(fingerprint(self._state.sharded_state_dict()), RUN_BOUND_KEYS)
        return self._cache[iteration]


@lru_cache(maxsize=16)
def never_stopped(spec: ModelSpec) -> NeverStopped:
    return NeverStopped(spec)
