"""Hypothesis strategies for whole scenarios (resilience.runner.scenario.Scenario): the combinations, the
backend specs, the lifecycle actions and the scenarios they make.

A scenario validates like a YAML file and shrinks toward fewer steps, plainer faults, the smallest
topology and model, the first combination and the backend's defaults."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import replace

from hypothesis import strategies as st

from ..errors import ConfigError
from ..state import ModelSpec
from ..state.precision import DTYPES, Precision
from ..state.topology import MAX_FUZZ_WORLD as MAX_WORLD
from ..vocab.combos import Combination, valid_combinations
from . import lifecycle as lc
from .state_strategies import model_specs, topologies as _topologies
from .strategy_args import check_int, check_names, fail

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
                raise fail("among", e.problem, e.fix) from None
        if not chosen:
            raise fail("among", "is empty", "leave it out for every valid combination")
        pool = [c for c in pool if c in chosen]
    if types is not None:
        names = {
            t.upper()
            for t in check_names(
                [t.upper() for t in ([types] if isinstance(types, str) else types)],
                "types",
                ("LEGACY", "LOCAL", "GLOBAL", "TORCH_DCP"),
            )
        }
        pool = [c for c in pool if c.type.value in names]
    if io is not None:
        check_names(io, "io", ("sync", "async"))
        pool = [c for c in pool if c.io.value == io]
    if not pool:
        raise fail(
            "combinations", "no valid combination matches", "valid: " + "; ".join(map(str, valid_combinations()))
        )
    return st.sampled_from(pool)


_combinations = combinations  # scenarios() takes an argument of the same name


def staggers() -> st.SearchStrategy[float]:
    """A resumed job's stagger: none, or 1 in 8 across a wall-clock second (each costs a second); shrinks to none."""
    return st.integers(0, 7).map(lambda i: lc.STAGGERS[i == 7])


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
            staggers(),
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
                st.sampled_from(lc.IO_ERROR_OPS + ("zeros", "garbage", lc.SECONDS)),
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


# the corners a model is drawn into (runner.corners), each listed first so a failure shrinks toward it: a start
# past iter_%07d's padding or at 8 (saves at 9 and past 10), parameters just past 4 KiB and of one row (an empty
# distributed-optimizer shard), padding rows with values (only where no resume changes tp)
START_ITERATIONS = (9_999_998, 8, 0)
SIZED_PARAMS: tuple[dict[str, int], ...] = ({"past_4k": 1025, "one_row": 1}, {})


def _cornered(model: ModelSpec, *, padding: bool) -> st.SearchStrategy[ModelSpec]:
    return st.builds(
        lambda start, sized, pad: replace(model, start_iteration=start, sized_params=sized, padding_values=pad),
        st.sampled_from(START_ITERATIONS),
        st.sampled_from(SIZED_PARAMS),
        st.sampled_from((True, False)) if padding else st.just(False),
    )


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
        raise fail("backend", e.problem, e.fix) from None
    if spec is None:
        raise fail("backend", f"must be a backend name, got {backend!r}", "'dcp', 'megatron' or module:factory")
    base, given = split(spec)
    chosen = [o for o in declared if o.name not in given]
    if options is not None:
        names = check_names(list(options), "options", [o.name for o in chosen])
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


def _fault_kinds(faults: Iterable[str] | None) -> frozenset[str]:
    """The fault kinds a generated scenario may draw: `faults` checked (default: SCENARIO_FAULTS)."""
    allowed = SCENARIO_FAULTS
    if faults is not None:
        faults = list(faults)
        bad = [k for k in faults if k in TIMED_FAULTS]
        if bad:
            raise fail(
                "faults",
                f"{bad[0]} strikes at a time or file size seen from outside: a generated "
                "failure would not replay exactly",
                f"use some of {', '.join(allowed)}",
            )
    return (
        frozenset(check_names(faults, "faults", allowed) if faults else ())
        if faults is not None
        else frozenset(SCENARIO_FAULTS)
    )


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
    check_int("max_world", max_world, 1, MAX_WORLD)
    check_int("min_steps", min_steps, 0)
    check_int("max_steps", max_steps, 1)
    check_int("max_layers", max_layers, 1)
    if min_steps > max_steps:
        raise fail("min_steps", f"{min_steps} is larger than max_steps={max_steps}")
    kinds = _fault_kinds(faults)
    if not isinstance(backend, str) or not backend:
        raise fail(
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
        # drawn last, so the draws before them make the examples they made before the corners. Padding rows
        # with values make a model of its tp (a precision change's oracle holds it on one rank as tp 1)
        padding = all(t.tp == base.tp for t in others) and not precision_changes
        model = draw(_cornered(model, padding=padding))
        precisions = other_precisions(model) if precision_changes else None
        life = lc.interpret(combo, base, others, drawn, precisions, model.start_iteration)
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
