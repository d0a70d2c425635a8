"""Fingerprints of training that never stopped, computed in this process on one rank, with no process
group: the same answer inside a live group of ranks (the cluster verdicts), where one rank alone must not
create a group (a new_group on one rank hangs every other). The training step is topology-invariant,
so these hold for every topology."""
from __future__ import annotations

from functools import lru_cache
from types import SimpleNamespace

from ..state import RUN_BOUND_KEYS, ModelSpec, Topology, TrainingState, combine
from ..state.fingerprint import assemble, local_pieces

_NO_GROUPS = SimpleNamespace(dp_group=None, dp_ranks=[0])


def local_fingerprint(state: TrainingState) -> dict[str, str]:
    """{key: digest} of a state held whole by this process (no collective)."""
    return assemble(local_pieces(state.sharded_state_dict()))


class NeverStopped:
    """iteration -> fingerprint of a tp1pp1dp1 run from scratch. Steps forward incrementally; caches every
    answer."""

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


@lru_cache(maxsize=16)
def never_stopped(spec: ModelSpec) -> NeverStopped:
    return NeverStopped(spec)
