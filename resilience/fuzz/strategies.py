"""Hypothesis strategies for topologies, model specs, precisions, transitions, combinations, faults and
scenarios.

Every strategy draws only valid values (a model spec splits over its topologies, a fault record
checks for its world size, a scenario validates like a YAML file) and shrinks toward the simplest:
the smallest world, the smallest model, the first combination, the fewest and plainest steps.
Arguments are keyword-only and checked when the strategy is built; a bad one raises
InvalidStrategyArgument (both hypothesis.errors.InvalidArgument and resilience's ConfigError)."""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from functools import lru_cache, reduce

from hypothesis import strategies as st
from hypothesis.errors import InvalidArgument

from ..errors import ConfigError
from ..faults import KINDS, Fault, fault_from_dict
from ..state import ModelSpec, Topology, Transition
from ..state.model import OPTIMIZERS
from ..state.precision import DTYPES, Precision
from ..state.topology import MAX_WORLD
from ..vocab.combos import Combination, valid_combinations
from ..vocab.phases import PHASES
from . import lifecycle as lc

DIMS = ("tp", "pp", "dp")
# Fault kinds scenarios() draws by default: deterministic ones, so every failure replays exactly.
# The nemesis kinds (rank_kill, rank_hang, writer_kill) strike after a time or a file size seen from outside:
# their outcome depends on timing, which would make a shrunk failure flaky.
SCENARIO_FAULTS = (
    "rank_crash",
    "io_error",
    "short_write",
    "torn_write",
    "slow_write",
    "lost_unsynced_writes",
    "truncate",
    "bit_flip",
    "delete_file",
    "metadata_damage",
    "tracker_damage",
    "leftover_staging",
    "extra_file",
    "escaping_path",
    "hostile_pickle",
)
TIMED_FAULTS = ("rank_kill", "rank_hang", "writer_kill")


class InvalidStrategyArgument(ConfigError, InvalidArgument):
    """A strategy was given an argument it cannot draw from; names the argument and the fix."""


def _fail(arg: str, problem: str, fix: str = "") -> InvalidStrategyArgument:
    return InvalidStrategyArgument(arg, problem, fix)


def _check_int(name: str, value, minimum: int, maximum: int | None = None) -> None:
    if isinstance(value, bool) or not isinstance(value, int):
        raise _fail(name, f"must be an integer, got {value!r}")
    if value < minimum or (maximum is not None and value > maximum):
        bound = f"between {minimum} and {maximum}" if maximum is not None else f"at least {minimum}"
        raise _fail(name, f"must be {bound}, got {value}")


def _as_topology(value, name: str) -> Topology:
    if isinstance(value, Topology):
        return value
    if isinstance(value, str):
        try:
            return Topology.parse(value)
        except ConfigError as e:
            raise _fail(name, e.problem, e.fix) from None
    raise _fail(name, f"must be a Topology or a string like 'tp2pp1dp1', got {value!r}")


def _names(value, name: str, allowed: Sequence[str]) -> tuple[str, ...]:
    items = (value,) if isinstance(value, str) else tuple(value)
    for v in items:
        if v not in allowed:
            raise _fail(name, f"unknown value {v!r}", f"use some of {', '.join(allowed)}")
    if not items:
        raise _fail(name, "is empty", f"leave it out for all of {', '.join(allowed)}")
    return items


# ---- topologies --------------------------------------------------------------------------------------
def _all_topologies(min_world: int, max_world: int, fixed: dict[str, int]) -> list[Topology]:
    """Every topology in the bounds, simplest first (world size, then pp, tp, dp)."""
    out = []
    for tp in range(1, max_world + 1):
        for pp in range(1, max_world // tp + 1):
            for dp in range(1, max_world // (tp * pp) + 1):
                t = {"tp": tp, "pp": pp, "dp": dp}
                if all(t[k] == v for k, v in fixed.items()) and min_world <= tp * pp * dp:
                    out.append(Topology(tp, pp, dp))
    return sorted(out, key=lambda t: (t.world, t.pp, t.tp, t.dp))


def _pick(draw, found: list[Topology], universe: list[Topology]) -> Topology:
    """One of `found`, a dimension at a time (tp, then pp, then dp), each the i-th smallest value still
    possible (clamped). The indices range over `universe`, so every draw makes the same choices and a
    failure that needs tp=2 shrinks to tp2pp1dp1 whatever else was drawn."""

    def nth(values: set, dim: str) -> int:
        index = draw(st.integers(0, max(len({getattr(t, dim) for t in universe}) - 1, 0)))
        ordered = sorted(values)
        return ordered[min(index, len(ordered) - 1)]

    tp = nth({t.tp for t in found}, "tp")
    pp = nth({t.pp for t in found if t.tp == tp}, "pp")
    dp = nth({t.dp for t in found if t.tp == tp and t.pp == pp}, "dp")
    return Topology(tp, pp, dp)


def _from_candidates(found: list[Topology]) -> st.SearchStrategy[Topology]:
    return st.composite(lambda draw: _pick(draw, found, found))()


def topologies(
    *, min_world: int = 1, max_world: int = 4, tp: int | None = None, pp: int | None = None, dp: int | None = None
) -> st.SearchStrategy[Topology]:
    """Topologies with min_world <= tp*pp*dp <= max_world; `tp`, `pp`, `dp` fix a dimension.
    Shrinks toward the smallest world (tp1pp1dp1)."""
    _check_int("max_world", max_world, 1, MAX_WORLD)
    _check_int("min_world", min_world, 1, MAX_WORLD)
    if min_world > max_world:
        raise _fail("min_world", f"{min_world} is larger than max_world={max_world}")
    fixed = {}
    for name, value in (("tp", tp), ("pp", pp), ("dp", dp)):
        if value is not None:
            _check_int(name, value, 1)
            fixed[name] = value
    found = _all_topologies(min_world, max_world, fixed)
    if not found:
        fixes = "".join(f"{k}{v}" for k, v in fixed.items())
        raise _fail(
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
    _check_int("max_world", max_world, 1, MAX_WORLD)
    want = None if changes is None else frozenset(_names(changes, "changes", DIMS) if changes else ())
    saves = [_as_topology(save, "save")] if save is not None else _all_topologies(1, max_world, {})
    if save is not None and saves[0].world > max_world:
        raise _fail("save", f"{saves[0]} has world size {saves[0].world} > max_world={max_world}")
    loads = _all_topologies(1, max_world, {})

    def targets(s: Topology) -> list[Topology]:
        return [t for t in loads if want is None or frozenset(Transition(s, t).changed) == want]

    pairs = {s: targets(s) for s in saves}
    saves = [s for s in saves if pairs[s]]
    if not saves:
        raise _fail(
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
    ps = _names(params, "params", DTYPES) if params is not None else DTYPES
    os_ = _names(optim, "optim", DTYPES) if optim is not None else DTYPES
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
        raise _fail("topology", "give topology or topologies, not both")
    topos = [
        _as_topology(t, "topologies")
        for t in (topologies if topologies is not None else [topology] if topology is not None else [])
    ]
    if topologies is not None and not topos:
        raise _fail("topologies", "is empty", "give at least one topology, or leave it out")
    for name, value in (("max_layers", max_layers), ("max_heads", max_heads), ("max_vocab", max_vocab)):
        _check_int(name, value, 1)
    dts = _names(dtypes, "dtypes", DTYPES) if dtypes is not None else DTYPES
    opts = _names(optimizers, "optimizers", OPTIMIZERS) if optimizers is not None else OPTIMIZERS
    moments = _names(optim_dtypes, "optim_dtypes", DTYPES) if optim_dtypes is not None else DTYPES
    tp = reduce(math.lcm, (t.tp for t in topos), 1)
    pp = reduce(math.lcm, (t.pp for t in topos), 1)
    return _specs(tp, pp, max_layers, max_heads, max_vocab, tuple(dts), tuple(opts), tuple(moments))


@lru_cache(maxsize=256)
def _specs(tp: int, pp: int, max_layers: int, max_heads: int, max_vocab: int, dts: tuple, opts: tuple, moments: tuple):
    # cached: scenarios() asks for one per drawn set of topologies, and building a composite compiles code
    @st.composite
    def draw_spec(draw) -> ModelSpec:
        heads = tp * draw(st.integers(1, max_heads))
        return ModelSpec(
            num_layers=pp * draw(st.integers(1, max_layers)),
            hidden=heads * draw(st.integers(1, 4)),
            ffn_hidden=tp * draw(st.integers(1, 8)),
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


# ---- combinations -----------------------------------------------------------------------------------
def combinations(
    *, among: Iterable[Combination | str] | None = None, types: Iterable[str] | None = None, io: str | None = None
) -> st.SearchStrategy[Combination]:
    """Valid (type, format, io) combinations, in the seed's table order (LEGACY/torch/sync first).
    `among` restricts to a list (objects or 'TYPE/format/io'); `types` to checkpoint types; `io` to
    'sync' or 'async'."""
    pool = valid_combinations()
    if among is not None:
        chosen = []
        for c in [among] if isinstance(among, (str, Combination)) else list(among):
            try:
                chosen.append(c if isinstance(c, Combination) else Combination.parse(c))
            except ConfigError as e:
                raise _fail("among", e.problem, e.fix) from None
        if not chosen:
            raise _fail("among", "is empty", "leave it out for every valid combination")
        pool = [c for c in pool if c in chosen]
    if types is not None:
        names = {
            t.upper()
            for t in _names(
                [t.upper() for t in ([types] if isinstance(types, str) else types)],
                "types",
                ("LEGACY", "LOCAL", "GLOBAL", "TORCH_DCP"),
            )
        }
        pool = [c for c in pool if c.type.value in names]
    if io is not None:
        _names(io, "io", ("sync", "async"))
        pool = [c for c in pool if c.io.value == io]
    if not pool:
        raise _fail(
            "combinations", "no valid combination matches", "valid: " + "; ".join(map(str, valid_combinations()))
        )
    return st.sampled_from(pool)


# ---- faults ----------------------------------------------------------------------------------------
def _rank_or_all(world: int, *, required: bool = False):
    ranks = st.integers(0, world - 1)
    return ranks if required else st.none() | ranks


def _fault_dicts(kind: str, world: int) -> st.SearchStrategy[dict]:
    """Records of one kind: what, where (rank, path, op), when (trigger), offset, seed."""
    seed = st.integers(0, 2**16)
    rank = _rank_or_all(world)
    one_rank = _rank_or_all(world)
    nth = st.integers(1, 4)
    if kind == "rank_crash":
        point = st.one_of(
            st.builds(lambda p: {"phase": p}, st.sampled_from(PHASES)),
            st.builds(
                lambda b, g: {"at_byte": b, **({"path": g} if g else {})},
                st.integers(0, 1 << 16),
                st.sampled_from([None, "*.pt", "*.distcp"]),
            ),
            st.builds(
                lambda o, w, n: {"op": o, "when": w, "nth": n},
                st.sampled_from(("create", "write", "fsync", "close", "rename", "mkdir")),
                st.sampled_from(("before", "after")),
                nth,
            ),
        )
        return st.builds(lambda r, p, s: {"kind": kind, "rank": r, **p, "seed": s}, rank, point, seed)
    if kind == "lost_unsynced_writes":
        point = st.none() | st.builds(lambda p: {"phase": p}, st.sampled_from(PHASES))
        return st.builds(
            lambda r, p, m, t, s: {
                "kind": kind,
                **({"rank": r, **p} if p else {}),
                "max_states": m,
                "torn": t,
                "seed": s,
            },
            rank,
            point,
            st.integers(1, 8),
            st.booleans(),
            seed,
        )
    if kind == "io_error":
        return st.builds(
            lambda r, o, n, e, s: {"kind": kind, "rank": r, "op": o, "nth": n, "errno": e, "seed": s},
            rank,
            st.sampled_from(("create", "write", "fsync", "close", "rename", "mkdir", "read")),
            nth,
            st.sampled_from(lc.ERRNOS + ("EDQUOT",)),
            seed,
        )
    if kind in ("short_write", "torn_write"):
        extra = st.fixed_dictionaries({}, optional={"keep": st.integers(0, 4096)})
        if kind == "torn_write":
            extra = st.builds(lambda d, f: {**d, "fill": f}, extra, st.sampled_from(("zeros", "garbage")))
        return st.builds(lambda r, n, d, s: {"kind": kind, "rank": r, "nth": n, **d, "seed": s}, rank, nth, extra, seed)
    if kind == "slow_write":
        return st.builds(
            lambda r, n, d, t, s: {"kind": kind, "rank": r, "nth": n, "delay": d, "times": t, "seed": s},
            rank,
            nth,
            st.sampled_from((0.01, 0.05, 0.2)),
            st.none() | st.integers(1, 4),
            seed,
        )
    if kind in ("rank_kill", "rank_hang"):
        when = st.one_of(
            st.builds(lambda a: {"after": a}, st.sampled_from((0.0, 0.1, 0.5, 1.0))),
            st.builds(
                lambda b, g: {"size": b, "path": g}, st.integers(0, 1 << 16), st.sampled_from(("*.pt", "*.distcp", "*"))
            ),
        )
        how: dict[str, st.SearchStrategy] = (
            {"signal": st.sampled_from(("SIGKILL", "SIGTERM"))}
            if kind == "rank_kill"
            else {"resume_after": st.none() | st.sampled_from((0.1, 0.5))}
        )
        return st.builds(
            lambda r, w, e, s: {"kind": kind, "rank": r, **w, **e, "seed": s},
            rank,
            when,
            st.fixed_dictionaries(how),
            seed,
        )
    if kind == "writer_kill":
        return st.builds(
            lambda r, w, sc, s: {"kind": kind, "rank": r, **w, "scope": sc, "seed": s},
            rank,
            st.sampled_from(({}, {"path": "*.distcp"}, {"path": "*.distcp", "size": 1024}, {"after": 0.1})),
            st.sampled_from(("tree", "holder")),
            seed,
        )
    at_rest: dict[str, st.SearchStrategy] = {  # type: ignore[assignment]  # one row of the table
        "truncate": {"length": st.none() | st.integers(0, 64)},
        "bit_flip": {
            "bits": st.none() | st.lists(st.integers(0, 7), min_size=1, max_size=3, unique=True).map(tuple),
            "offset": st.none() | st.integers(0, 64),
        },
        "delete_file": {},
        "metadata_damage": {
            "name": st.sampled_from(("manifest.json", ".metadata", "metadata.json")),
            "how": st.sampled_from(lc.METADATA_HOW),
        },
        "tracker_damage": {"how": st.sampled_from(lc.TRACKER_HOW)},
        "leftover_staging": {},
        "extra_file": {"name": st.sampled_from(("unexpected.bin", "notes.txt")), "length": st.integers(0, 64)},
        "escaping_path": {"escape": st.sampled_from(("../outside.pt", "/etc/passwd"))},
        "hostile_pickle": {},
    }[kind]
    iteration = (
        {"iteration": st.integers(0, 8)}
        if kind
        in ("truncate", "bit_flip", "delete_file", "metadata_damage", "extra_file", "escaping_path", "hostile_pickle")
        else {}
    )

    def build(r, fields, opt, s):
        d = {"kind": kind, **({"rank": r} if r is not None else {}), **fields, **opt, "seed": s}
        if "offset" in d and d["offset"] is None:
            del d["offset"]
        if "bits" in d and d["bits"] is None:
            del d["bits"]
        if "length" in d and d["length"] is None:
            del d["length"]
        return d

    return st.builds(
        build, one_rank, st.fixed_dictionaries(at_rest), st.fixed_dictionaries({}, optional=iteration), seed
    )


def faults(*, world: int, kinds: Iterable[str] | None = None) -> st.SearchStrategy[Fault]:
    """Single fault records (resilience.faults) valid for `world` ranks: kind, target (rank, path, op,
    iteration, offset), trigger (nth, phase, at_byte, ...), seed. `kinds` restricts the kinds (names of
    resilience.faults.KINDS). Whether a record fires depends on what the run does; see scenarios()."""
    _check_int("world", world, 1, MAX_WORLD)
    from ..faults import kinds as _defined  # noqa: F401  (registers every kind)

    names = _names(kinds, "kinds", tuple(KINDS)) if kinds is not None else tuple(KINDS)
    return st.one_of([_fault_dicts(k, world) for k in names]).map(
        lambda d: fault_from_dict(d, world=world, where="fault")
    )


def fault_schedules(
    *, world: int, kinds: Iterable[str] | None = None, min_size: int = 0, max_size: int = 3
) -> st.SearchStrategy[list[Fault]]:
    """Lists of fault records for `world` ranks (see faults()); shrinks toward fewer, plainer faults."""
    _check_int("min_size", min_size, 0)
    _check_int("max_size", max_size, 0)
    if min_size > max_size:
        raise _fail("min_size", f"{min_size} is larger than max_size={max_size}")
    return st.lists(faults(world=world, kinds=kinds), min_size=min_size, max_size=max_size)


_combinations, _topologies = combinations, topologies  # scenarios() takes arguments of the same names


# ---- scenarios -------------------------------------------------------------------------------------
def _actions(fault_kinds: frozenset[str], moves: bool, precision_changes: bool = False) -> st.SearchStrategy:
    """Raw lifecycle actions (see lifecycle.py), plainest first so lists shrink toward train and save."""
    rank = st.integers(0, 7)
    seed = st.integers(0, 1000)
    options = [
        st.builds(lc.Train, st.integers(1, 3)),
        st.just(lc.Save()),
        st.builds(
            lc.Resume,
            st.none() | st.integers(0, 3) if moves else st.none(),
            st.integers(0, 2),
            st.none() | st.integers(0, 2) if precision_changes else st.none(),
        ),
        st.just(lc.Finalize()),
    ]
    if "rank_crash" in fault_kinds:
        point = st.one_of(
            st.tuples(st.just("phase"), st.sampled_from(lc.CRASH_PHASES)),
            st.tuples(st.just("byte"), st.integers(1, 1024)),
            st.tuples(st.just("op"), st.sampled_from(lc.CRASH_OPS), st.sampled_from(("before", "after"))),
        )
        options.append(st.builds(lc.CrashDuringSave, rank, point))
    writes = [k for k in lc.WRITE_FAULTS if k in fault_kinds]
    if writes:
        options.append(
            st.builds(
                lc.FaultDuringSave,
                st.sampled_from(writes),
                rank,
                st.integers(1, 2),
                st.sampled_from(lc.IO_ERROR_OPS + ("zeros", "garbage")),
                st.sampled_from(lc.ERRNOS),
                st.sampled_from(tuple(lc.FAULT_FILES)),
            )
        )
    if "lost_unsynced_writes" in fault_kinds:
        options.append(st.builds(lc.PowerLoss, rank, st.none() | st.sampled_from(lc.CRASH_PHASES), st.integers(1, 3)))
    rest = [k for k in lc.CORRUPTIONS if k in fault_kinds]
    if rest:
        options.append(
            st.builds(
                lc.Corrupt,
                st.sampled_from(rest),
                rank,
                seed,
                st.sampled_from(lc.METADATA_HOW + lc.TRACKER_HOW),
                st.booleans(),
            )
        )
    if "delete_file" in fault_kinds:
        options.append(st.builds(lc.DeleteOld, st.integers(0, 3), seed))
    return st.one_of(options)


def other_precisions(model: ModelSpec) -> list[str]:
    """Every precision a resume of `model` may change to, as a resume step writes it."""
    every = [Precision(p, o) for o in DTYPES for p in DTYPES]
    return [str(p) for p in every if p != model.precision]


def backend_specs(backend: str, *, options: Iterable[str] | None = None) -> st.SearchStrategy[str]:
    """Backend specs over the options `backend` declares (resilience.backends.options): each option
    (of `options`, when given) at its default or another value that can run here; the spec names only
    the changed ones (`dcp:sync_files=false`). Shrinks toward the defaults, i.e. `backend` itself."""
    from ..backends.options import join_spec, show
    from ..runner.adapters import ALIASES, declared_options, parse_backend, split

    try:
        spec = parse_backend(backend) if isinstance(backend, str) else None
        declared = declared_options(spec) if spec is not None else ()
    except ConfigError as e:
        raise _fail("backend", e.problem, e.fix) from None
    if spec is None:
        raise _fail("backend", f"must be a backend name, got {backend!r}", "'dcp', 'megatron' or module:factory")
    base, given = split(spec)
    chosen = [o for o in declared if o.name not in given]
    if options is not None:
        names = _names(list(options), "options", [o.name for o in chosen])
        chosen = [o for o in chosen if o.name in names]

    def values(o):
        if o.between is not None:
            lo, hi = o.between
            others = st.integers(lo, min(hi, lo + 7)).filter(lambda v: v != o.default)
            return st.one_of(st.just(o.default), others)
        return st.sampled_from([o.default] + [c for c in o.choices if c != o.default and c not in o.refused])

    @st.composite
    def draw_spec(draw):
        picked = {o.name: draw(values(o)) for o in chosen}
        changed = {k: show(v) for k, v in picked.items() if v != next(o.default for o in chosen if o.name == k)}
        return join_spec(base, {**given, **changed}, alias=base in ALIASES)

    return draw_spec()


def scenarios(
    *,
    combinations: Iterable[Combination | str] | None = None,
    max_world: int = 4,
    faults: Iterable[str] | None = None,
    min_steps: int = 1,
    max_steps: int = 8,
    moves: bool = True,
    max_layers: int = 2,
    backend: str = "reference",
    backend_options: bool = False,
    precision_changes: bool = False,
    name: str = "generated",
) -> st.SearchStrategy:
    """Whole scenarios (resilience.runner.scenario.Scenario) that validate like a YAML file: one
    combination, a topology, a model that splits over every topology the scenario uses, and a
    lifecycle of train / save / finalize / faults / resume steps.

    `faults` names the fault kinds to draw (default: SCENARIO_FAULTS, the deterministic ones;
    () for none); `moves` allows resumes on other topologies; `min_steps`/`max_steps` bound the
    drawn actions (each may stand for one to three steps); `backend_options` also draws the backend's
    declared options (backend_specs) into the scenario's backend; `precision_changes` lets a resume after
    the last save change the precision (the parameters' or the optimizer moments' dtype, judged by the
    precision checker). Shrinks toward fewer steps, plainer
    faults, the smallest topology and model, the first combination and the backend's defaults."""
    from ..runner.scenario import from_dict

    combos = _combinations(among=combinations) if combinations is not None else _combinations()
    _check_int("max_world", max_world, 1, MAX_WORLD)
    _check_int("min_steps", min_steps, 0)
    _check_int("max_steps", max_steps, 1)
    _check_int("max_layers", max_layers, 1)
    if min_steps > max_steps:
        raise _fail("min_steps", f"{min_steps} is larger than max_steps={max_steps}")
    allowed = SCENARIO_FAULTS
    if faults is not None:
        faults = list(faults)
        bad = [k for k in faults if k in TIMED_FAULTS]
        if bad:
            raise _fail(
                "faults",
                f"{bad[0]} strikes at a time or file size seen from outside: a generated "
                "failure would not replay exactly",
                f"use some of {', '.join(allowed)}",
            )
    kinds = (
        frozenset(_names(faults, "faults", allowed) if faults else ())
        if faults is not None
        else frozenset(SCENARIO_FAULTS)
    )
    if not isinstance(backend, str) or not backend:
        raise _fail(
            "backend", f"must be a backend name, got {backend!r}", "'reference', 'broken:NAME' or module:factory"
        )
    topos = _topologies(max_world=max_world)
    actions = _actions(kinds, moves, precision_changes)
    specs = backend_specs(backend) if backend_options else st.just(backend)

    @st.composite
    def draw_scenario(draw):
        combo = draw(combos)
        base = draw(topos)
        others = draw(st.lists(topos.filter(lambda t: t != base), max_size=2, unique=True)) if moves else []
        model = draw(model_specs(topologies=[base, *others], max_layers=max_layers, max_heads=2, max_vocab=32))
        drawn = draw(st.lists(actions, min_size=min_steps, max_size=max_steps))
        life = lc.interpret(combo, base, others, drawn, other_precisions(model) if precision_changes else None)
        return from_dict(
            {
                "name": name,
                "topology": str(base),
                "model": model.to_dict(),
                "combinations": [str(combo)],
                "steps": life.steps,
                "backend": draw(specs),
                "tags": ["generated"],
            },
            source=f"<{name}>",
        )

    return draw_scenario()


__all__ = [
    "InvalidStrategyArgument",
    "SCENARIO_FAULTS",
    "TIMED_FAULTS",
    "backend_specs",
    "combinations",
    "dtypes",
    "fault_schedules",
    "faults",
    "model_specs",
    "optimizers",
    "precisions",
    "scenarios",
    "topologies",
    "transitions",
]
