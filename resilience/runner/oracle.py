"""The oracle: what a correct load must give, found without any checkpoint. Fingerprints of training that
never stopped, computed in this process on one rank, with no process group: the same answer inside a live
group of ranks (the cluster verdicts), where one rank alone must not create a group (a new_group on one
rank hangs every other). The training step is topology-invariant, so these hold for every topology. A
resume may also change the precision (the parameters' or the optimizer moments' dtype): PrecisionChange
says what such a load must give."""

from __future__ import annotations

from functools import lru_cache

import torch

from ..checkers.evidence import PrecisionTargets
from ..state import RUN_BOUND_KEYS, ModelSpec, ParallelGroups, Topology, TrainingState, combine
from ..state.fingerprints import assemble, local_pieces
from ..state.precision import Precision


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
                self._state = TrainingState(
                    self.spec, Topology(1, 1, 1), 0, groups=ParallelGroups.without_collectives()
                )
            while self._state.iteration < iteration:
                self._state.step()
            self._cache[iteration] = combine(local_fingerprint(self._state), RUN_BOUND_KEYS)
        return self._cache[iteration]


@lru_cache(maxsize=16)
def never_stopped(spec: ModelSpec) -> NeverStopped:
    return NeverStopped(spec)


class PrecisionChange:
    """(iteration, saved precision, loaded precision) -> checkers.PrecisionTargets: what a load of the
    never-stopped state saved in one precision ('bf16', 'fp32+optim_bf16', ...) gives in the other,
    converted exactly or cast, as fingerprints, what each loses, and training on from each. Written apart
    from the reference's conversion (TrainingState.records_in_precision), on whole tensors of one rank, so
    the two check each other."""

    def __init__(self, spec: ModelSpec):
        self.spec = spec
        self._cache: dict[tuple, PrecisionTargets] = {}

    def __call__(self, iteration: int, saved: str, loaded: str) -> PrecisionTargets:
        key = (iteration, str(Precision.parse(saved)), str(Precision.parse(loaded)))
        if key not in self._cache:
            source = self._source(iteration, saved)
            exact, cast = (convert(source, loaded, exact=how == "exact") for how in ("exact", "cast"))
            after = {
                "exact": _TrainedOn(lambda: convert(self._source(iteration, saved), loaded, exact=True)),
                "cast": _TrainedOn(lambda: convert(self._source(iteration, saved), loaded, exact=False)),
            }
            unavoidable = precision_lost(source, exact)
            self._cache[key] = PrecisionTargets(
                _digest(exact),
                _digest(cast),
                precision_lost(source, cast),
                lambda how, it: after[how](it),
                "" if unavoidable == NOTHING_LOST else unavoidable,
            )
        return self._cache[key]

    def _source(self, iteration: int, saved: str) -> TrainingState:
        source = _fresh(self.spec.in_precision(saved))
        while source.iteration < iteration:
            source.step()
        return source


def convert(source: TrainingState, precision: Precision | str, *, exact: bool) -> TrainingState:
    """A whole (one-rank) state in `precision` made from `source`. Parameters exactly (fp32 parameters
    become the fp32 main parameters, the bf16 parameters rounded from them; fp32 parameters taken from the
    fp32 main parameters), or cast (the fp32 main parameters rebuilt from the rounded bf16 parameters; fp32
    parameters upcast from the bf16 ones). Optimizer moments either way: bf16 ones upcast (exact), fp32 ones
    rounded to nearest into bf16, which no conversion avoids."""
    p = Precision.parse(precision)
    state = _fresh(source.spec.in_precision(p))
    state.iteration, state.consumed_samples, state.opt_step = source.iteration, source.consumed_samples, source.opt_step
    state.generation = source.generation
    state.grad_scale.copy_(source.grad_scale)  # fp32 in every precision
    state.rng.set_state(source.rng.get_state())
    for key, param in state.params.items():
        for mine, theirs in (
            (state.exp_avg, source.exp_avg),
            (state.exp_avg_sq, source.exp_avg_sq),
            (state.stamps, source.stamps),
        ):
            mine[key].copy_(theirs[key].to(mine[key].dtype))
        if p.params == source.spec.dtype:
            param.copy_(source.params[key])
            if key in source.main:
                state.main[key].copy_(source.main[key])
        elif key in state.main:  # fp32 -> bf16 (on one rank the main parameters cover the whole tensor)
            param.copy_(source.params[key].to(param.dtype))
            state.main[key].copy_(source.params[key] if exact else param.float())
        else:  # bf16 -> fp32
            param.copy_(source.main[key] if exact else source.params[key].float())
    return state


NOTHING_LOST = "nothing (every value fits the new dtype)"


def precision_lost(saved: TrainingState, loaded: TrainingState) -> str:
    """What `loaded` lost against the `saved` state it was made from, in the fp32 values it changed: how
    many, and the largest relative error (bf16 keeps 8 significant bits: up to 2**-9 when rounding to
    nearest), for the parameters (their fp32 copy where one is kept) and the optimizer moments apart."""
    params = [
        (key, saved.main.get(key, want).float(), loaded.main.get(key, loaded.params[key]).float())
        for key, want in saved.params.items()
    ]
    moments = [
        (f"{name}.{key}", a[key].float(), b[key].float())
        for name, a, b in (
            ("exp_avg", saved.exp_avg, loaded.exp_avg),
            ("exp_avg_sq", saved.exp_avg_sq, loaded.exp_avg_sq),
        )
        for key in a
    ]
    said = [
        said
        for what, pairs in (
            ("fp32 main parameters" if loaded.main else "fp32 parameters", params),
            ("optimizer moments", moments),
        )
        if (said := _lost_in(what, pairs))
    ]
    return "; ".join(said) or NOTHING_LOST


def _lost_in(what: str, pairs: list[tuple[str, torch.Tensor, torch.Tensor]]) -> str:
    changed, total, worst, worst_key = 0, 0, 0.0, ""
    for key, a, b in pairs:
        total += a.numel()
        diff = a != b
        changed += int(diff.sum())
        if diff.any():
            rel = float(((a - b).abs() / a.abs().clamp_min(torch.finfo(torch.float32).tiny))[diff].max())
            if rel > worst:
                worst, worst_key = rel, key
    if not changed:
        return ""
    return f"{changed} of {total} {what} changed, relative error up to {worst:.2e} ({worst_key})"


class _TrainedOn:
    """iteration -> fingerprint of a state made by `make` trained on to that iteration."""

    def __init__(self, make):
        self.make = make
        self._state: TrainingState | None = None
        self._cache: dict[int, str] = {}

    def __call__(self, iteration: int) -> str:
        if iteration not in self._cache:
            if self._state is None or self._state.iteration > iteration:
                self._state = self.make()
            while self._state.iteration < iteration:
                self._state.step()
            self._cache[iteration] = _digest(self._state)
        return self._cache[iteration]


def _fresh(spec: ModelSpec) -> TrainingState:
    return TrainingState(spec, Topology(1, 1, 1), 0, groups=ParallelGroups.without_collectives())


def _digest(state: TrainingState) -> str:
    return combine(local_fingerprint(state), RUN_BOUND_KEYS)


@lru_cache(maxsize=16)
def precision_change(spec: ModelSpec) -> PrecisionChange:
    return PrecisionChange(spec)
