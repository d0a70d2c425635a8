"""Hypothesis strategies for the state a run trains: topologies, transitions between them, precisions,
optimizers and model specs.

Each draws only valid values (a model spec splits over its topologies) and shrinks toward the simplest:
the smallest world, no change, fp32, the smallest model."""

from __future__ import annotations

import math
from collections.abc import Iterable
from functools import lru_cache, reduce

from hypothesis import strategies as st

from ..state import ModelSpec, Topology, Transition
from ..state.model import OPTIMIZERS
from ..state.precision import DTYPES, Precision
from ..state.topology import MAX_FUZZ_WORLD as MAX_WORLD
from .strategy_args import as_topology, check_int, check_names, fail

DIMS = ("tp", "pp", "dp", "ep", "etp", "cp", "vpp")  # the dimensions drawn (model_specs gives ep, etp experts)
# the order they are picked in: ep, etp, cp and vpp first, so a failure that needs none shrinks them to 1
PICK_ORDER = ("ep", "etp", "cp", "vpp", "tp", "pp", "dp")


EXPERT_SIZES = (1, 2, 4)  # the ep and etp drawn (where they divide a stage): enough to regroup experts, few
# enough that the topologies of a world of 64 stay countable


def _expert_sizes(n: int) -> list[int]:
    return [d for d in EXPERT_SIZES if n % d == 0]


# ---- topologies --------------------------------------------------------------------------------------
def _all_topologies(min_world: int, max_world: int, fixed: dict[str, int]) -> list[Topology]:
    """Every topology in the bounds, simplest first (world size, then ep, etp, cp, vpp, pp, tp, dp)."""
    out = []
    for tp in range(1, max_world + 1):
        for pp in range(1, max_world // tp + 1):
            for dp in range(1, max_world // (tp * pp) + 1):
                for cp in range(1, max_world // (tp * pp * dp) + 1):
                    stage = tp * cp * dp  # ep x etp lays out the ranks of a stage again
                    for vpp, etp in ((v, e) for v in ((1, 2) if pp > 1 else (1,)) for e in _expert_sizes(stage)):
                        for ep in _expert_sizes(stage // etp):
                            t = {"tp": tp, "pp": pp, "dp": dp, "ep": ep, "etp": etp, "cp": cp, "vpp": vpp}
                            if all(t[k] == v for k, v in fixed.items()) and min_world <= tp * pp * dp * cp:
                                out.append(Topology(**t))
    return sorted(out, key=lambda t: (t.world, t.ep, t.etp, t.cp, t.vpp, t.pp, t.tp, t.dp))


def _pick(draw, found: list[Topology], universe: list[Topology]) -> Topology:
    """One of `found`, a dimension at a time (ep, etp, cp, vpp, tp, pp, then dp), each the i-th smallest value still
    possible (clamped). The indices range over `universe`, so every draw makes the same choices and a
    failure that needs tp=2 shrinks to tp2pp1dp1 whatever else was drawn."""

    def nth(values: set, dim: str) -> int:
        index = draw(st.integers(0, max(len({getattr(t, dim) for t in universe}) - 1, 0)))
        ordered = sorted(values)
        return ordered[min(index, len(ordered) - 1)]

    chosen: dict[str, int] = {}
    for dim in PICK_ORDER:  # each dimension among the topologies that agree with the ones chosen so far
        left = [t for t in found if all(getattr(t, d) == v for d, v in chosen.items())]
        chosen[dim] = nth({getattr(t, dim) for t in left}, dim)
    return Topology(**chosen)


def _from_candidates(found: list[Topology]) -> st.SearchStrategy[Topology]:
    return st.composite(lambda draw: _pick(draw, found, found))()


def topologies(
    *,
    min_world: int = 1,
    max_world: int = 4,
    tp: int | None = None,
    pp: int | None = None,
    dp: int | None = None,
    cp: int | None = None,
    vpp: int | None = None,
    ep: int | None = None,
    etp: int | None = None,
) -> st.SearchStrategy[Topology]:
    """Topologies with min_world <= tp*pp*dp*cp <= max_world (vpp 1 or 2 where pp > 1; ep x etp dividing
    tp*cp*dp, the ranks of a stage); `tp`, `pp`, `dp`, `cp`, `vpp`, `ep`, `etp` fix a dimension. Shrinks
    toward the smallest world (tp1pp1dp1), ep and etp 1. A model that splits over one with ep or etp > 1 has
    experts (model_specs)."""
    check_int("max_world", max_world, 1, MAX_WORLD)
    check_int("min_world", min_world, 1, MAX_WORLD)
    if min_world > max_world:
        raise fail("min_world", f"{min_world} is larger than max_world={max_world}")
    fixed = {}
    for name, value in (("tp", tp), ("pp", pp), ("dp", dp), ("cp", cp), ("vpp", vpp), ("ep", ep), ("etp", etp)):
        if value is not None:
            check_int(name, value, 1)
            fixed[name] = value
    found = _all_topologies(min_world, max_world, fixed)
    if not found:
        fixes = "".join(f"{k}{v}" for k, v in fixed.items())
        raise fail(
            "topologies",
            f"no topology with {fixes} has a world size between {min_world} and {max_world}",
            "raise max_world or change the fixed dimensions",
        )
    return _from_candidates(found)


def transitions(
    *,
    max_world: int = 4,
    save: Topology | str | None = None,
    changes: Iterable[str] | None = None,
    precisions: bool = False,
) -> st.SearchStrategy[Transition]:
    """Save topology -> load topology, both within max_world. `save` fixes the first; `changes` names
    the dimensions that differ (exactly those; () means the same topology); None: any. `precisions`:
    each side also names a precision (the parameters' and the optimizer moments' dtype), which may change.
    Shrinks toward no change on tp1pp1dp1 (in fp32)."""
    check_int("max_world", max_world, 1, MAX_WORLD)
    want = None if changes is None else frozenset(check_names(changes, "changes", DIMS) if changes else ())
    saves = [as_topology(save, "save")] if save is not None else _all_topologies(1, max_world, {})
    if save is not None and saves[0].world > max_world:
        raise fail("save", f"{saves[0]} has world size {saves[0].world} > max_world={max_world}")
    loads = _all_topologies(1, max_world, {})

    kept = [d for d in DIMS if want is not None and d not in want]  # the dimensions a load shares with its save
    by_kept: dict[tuple, list[Topology]] = {}
    for t in loads if want is not None else ():  # indexed: a save finds its loads without pairing every two
        by_kept.setdefault(tuple(getattr(t, d) for d in kept), []).append(t)

    def targets(s: Topology) -> list[Topology]:
        if want is None:
            return loads
        same = by_kept.get(tuple(getattr(s, d) for d in kept), [])
        return [t for t in same if all(getattr(t, d) != getattr(s, d) for d in want)]

    pairs = {s: targets(s) for s in saves}
    saves = [s for s in saves if pairs[s]]
    if not saves:
        raise fail(
            "changes",
            f"no transition within max_world={max_world} changes exactly "
            f"{', '.join(sorted(want or ())) or 'nothing'}" + (f" from {save}" if save is not None else ""),
            "raise max_world or change fewer dimensions",
        )

    sides = _precisions() if precisions else st.none()

    @st.composite
    def pick(draw) -> Transition:
        first = _pick(draw, saves, saves)
        return Transition(first, _pick(draw, pairs[first], loads), draw(sides), draw(sides))

    return pick()


# ---- model specs -----------------------------------------------------------------------------------
def dtypes() -> st.SearchStrategy[str]:
    """Parameter (or optimizer moment) dtypes of the state model (fp32 first)."""
    return st.sampled_from(DTYPES)


def precisions(
    *, params: Iterable[str] | None = None, optim: Iterable[str] | None = None
) -> st.SearchStrategy[Precision]:
    """Precisions of the state model: the parameters' dtype (bf16 keeps fp32 main parameters) and the
    optimizer moments' (`params`, `optim` restrict each to some of fp32, bf16). Shrinks toward fp32."""
    ps = check_names(params, "params", DTYPES) if params is not None else DTYPES
    os_ = check_names(optim, "optim", DTYPES) if optim is not None else DTYPES
    return _precisions(tuple(ps), tuple(os_))


def _precisions(params: tuple = DTYPES, optim: tuple = DTYPES) -> st.SearchStrategy[Precision]:
    return st.builds(Precision, st.sampled_from(params), st.sampled_from(optim))


def optimizers() -> st.SearchStrategy[str]:
    """Optimizer kinds: plain Adam (state sharded like its parameter) or Megatron's distributed optimizer."""
    return st.sampled_from(OPTIMIZERS)


def model_specs(
    *,
    topology: Topology | str | None = None,
    topologies: Iterable[Topology | str] | None = None,
    max_layers: int = 4,
    max_heads: int = 4,
    max_vocab: int = 64,
    dtypes: Iterable[str] | None = None,
    optimizers: Iterable[str] | None = None,
    optim_dtypes: Iterable[str] | None = None,
) -> st.SearchStrategy[ModelSpec]:
    """Small GPT-like model specs that split over `topology` (or over every one of `topologies`:
    layers divisible by each pp, heads and ffn_hidden by each tp). The bounds apply per multiple of
    the topologies' least common tp and pp. `dtypes`, `optimizers` and `optim_dtypes` restrict the
    parameters' dtype, the optimizer and its moments' dtype. Shrinks toward one layer, one head, a tiny
    vocabulary, fp32, and toward the adversarial state: a batch-size ramp-up, skipped iterations and values
    over a wide range."""
    if topology is not None and topologies is not None:
        raise fail("topology", "give topology or topologies, not both")
    topos = [
        as_topology(t, "topologies")
        for t in (topologies if topologies is not None else [topology] if topology is not None else [])
    ]
    if topologies is not None and not topos:
        raise fail("topologies", "is empty", "give at least one topology, or leave it out")
    for name, value in (("max_layers", max_layers), ("max_heads", max_heads), ("max_vocab", max_vocab)):
        check_int(name, value, 1)
    dts = check_names(dtypes, "dtypes", DTYPES) if dtypes is not None else DTYPES
    opts = check_names(optimizers, "optimizers", OPTIMIZERS) if optimizers is not None else OPTIMIZERS
    moments = check_names(optim_dtypes, "optim_dtypes", DTYPES) if optim_dtypes is not None else DTYPES
    tp = reduce(math.lcm, (t.tp for t in topos), 1)
    pp = reduce(math.lcm, (t.pp * t.vpp for t in topos), 1)
    ep = reduce(math.lcm, (t.ep for t in topos), 1)
    etp = reduce(math.lcm, (t.etp for t in topos), 1)
    experts = ep if any(t.ep * t.etp > 1 for t in topos) else 0  # 0: dense, as every topology allows
    return _specs(tp, pp, experts, etp, max_layers, max_heads, max_vocab, tuple(dts), tuple(opts), tuple(moments))


@lru_cache(maxsize=256)
def _specs(
    tp: int,
    pp: int,
    experts: int,
    etp: int,
    max_layers: int,
    max_heads: int,
    max_vocab: int,
    dts: tuple,
    opts: tuple,
    moments: tuple,
):
    # cached: scenarios() asks for one per drawn set of topologies, and building a composite compiles code
    @st.composite
    def draw_spec(draw) -> ModelSpec:
        heads = tp * draw(st.integers(1, max_heads))
        # experts, a multiple of every ep, when some topology splits them (drawn only then)
        num_experts = experts * draw(st.integers(1, 2)) if experts else 0
        return ModelSpec(
            num_layers=pp * draw(st.integers(1, max_layers)),
            hidden=heads * draw(st.integers(1, 4)),
            ffn_hidden=math.lcm(tp, etp) * draw(st.integers(1, 8)),
            num_experts=num_experts,
            shared_experts=bool(num_experts) and draw(st.booleans()),
            heads=heads,
            vocab=draw(st.integers(1, max_vocab)),
            make_vocab_size_divisible_by=draw(st.sampled_from((1, 2, 8, 128))),
            dtype=draw(st.sampled_from(dts)),
            optimizer=draw(st.sampled_from(opts)),
            optim_dtype=draw(st.sampled_from(moments)),
            global_batch_size=draw(st.integers(1, 16)),
            seed=draw(st.integers(0, 2**16)),
            # adversarial first (shrinks toward it): ramp-up, skipped iterations, wide values
            rampup_samples=draw(st.sampled_from((16, 0, 4, 64))),
            skip_every=draw(st.sampled_from((3, 0, 2, 5))),
            value_range=draw(st.sampled_from(("wide", "unit"))),
        )

    return draw_spec()
