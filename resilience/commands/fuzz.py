"""`resilience fuzz`: generated scenarios and the lifecycle state machine on real ranks, shrunk to
minimal failures. Exit status 1 when anything failed, 0 otherwise."""

from __future__ import annotations

import glob
import os

from .common import (
    add_io_argument,
    add_storage_arguments,
    add_workers_argument,
    combination_arg,
    number_arg,
    positive_float,
    positive_int,
    print_coverage,
    workers_of,
)

# decimal, or with a base prefix (0x...), as int(text, 0) reads it
_seed = number_arg(lambda text: int(text, 0), lambda v: v >= 0, "a non-negative integer")


def _max_world(text: str) -> int:
    from ..state.topology import MAX_FUZZ_WORLD as MAX_WORLD  # imported when used: the state package imports torch

    return number_arg(int, lambda v: 1 <= v <= MAX_WORLD, f"a whole number of ranks from 1 to {MAX_WORLD}")(text)


def register(sub) -> None:
    p = sub.add_parser(
        "fuzz",
        help="run generated scenarios and the checkpoint lifecycle state machine on real "
        "ranks; keep each failure as a minimal scenario with its replay command",
    )
    _add_search_arguments(p)
    _add_backend_arguments(p)
    p.add_argument("--out", default="runs", help="where the run folder goes (default: runs/)")
    add_io_argument(p)
    add_storage_arguments(p)
    add_workers_argument(p)
    p.set_defaults(func=run)


def _add_search_arguments(p) -> None:
    """How much to generate and how: examples, seed, combinations, sizes, budgets."""
    p.add_argument(
        "--examples",
        type=positive_int,
        default=None,
        metavar="N",
        help="examples per mode (default: the profile's, 50 for dev)",
    )
    p.add_argument(
        "--seed",
        type=_seed,
        default=None,
        metavar="S",
        help="seed of the run (default: 0 with --profile ci, else a random one, printed); the same "
        "seed replays the same examples",
    )
    p.add_argument(
        "--combos",
        nargs="+",
        type=combination_arg,
        metavar="TYPE/format/io",
        help="combinations to draw from (default: those the backend declares, else all six valid)",
    )
    p.add_argument(
        "--max-world", type=_max_world, default=2, metavar="W", help="largest world size (tp*pp*dp) drawn (default: 2)"
    )
    p.add_argument(
        "--max-steps",
        type=positive_int,
        default=6,
        metavar="K",
        help="actions per generated scenario and rules per state-machine run (default: 6)",
    )
    p.add_argument(
        "--time-budget",
        type=positive_float,
        default=None,
        metavar="T",
        help="seconds of generating, shared by the modes; no new example starts after it (default: no limit)",
    )
    p.add_argument(
        "--shrink-budget",
        type=positive_float,
        default=120.0,
        metavar="S",
        help="seconds a found failure may spend shrinking, per mode (default: 120)",
    )
    p.add_argument(
        "--all-bugs",
        action="store_true",
        help="shrink each failure class (checker and kind of evidence) separately (slower); default: one per mode",
    )


def _add_backend_arguments(p) -> None:
    """What is tested and what is drawn: the backend, its options, precision changes, faults, modes, profile."""
    p.add_argument(
        "--backend",
        default="reference",
        help="implementation under test: reference, broken:NAME or package.module:factory",
    )
    p.add_argument(
        "--backend-options",
        action="store_true",
        help="generated scenarios also draw the backend's declared options (e.g. dcp:sync_files=false); "
        "a failure's replay names the options it drew",
    )
    p.add_argument(
        "--precision-changes",
        action="store_true",
        help="a resume after the last save may change the precision (bf16 or fp32 parameters, bf16 or fp32 "
        "optimizer moments), judged by the precision checker",
    )
    p.add_argument(
        "--faults",
        nargs="*",
        metavar="KIND",
        help="fault kinds to draw (default: every deterministic kind; give none for no faults)",
    )
    p.add_argument(
        "--mode",
        nargs="+",
        choices=("scenarios", "machine"),
        default=["scenarios", "machine"],
        help="generated scenarios, the state machine, or both (default: both)",
    )
    p.add_argument(
        "--profile",
        default="dev",
        help="ci (25 examples, seed 0: fast and deterministic), dev (50, default) or fuzz (500)",
    )


def run(args) -> int:
    from ..launch import heap

    with heap.loading():  # torch and Hypothesis
        from ..fuzz import profiles  # noqa: F401  (registers ci, dev, fuzz)
        from ..fuzz.engine import fuzz
        from ..fuzz.options import FuzzOptions, replay_fuzz
        from ..runner.adapters import resolve_backend
        from ..runner.coverage import of_files
        from .progress import Progress

    backend = resolve_backend(args.backend)  # a bad backend: one clear error, now
    opts = _options(args, FuzzOptions, backend)
    _check(opts)
    _refuse_bad_backend(opts, backend)
    print(
        f"fuzz: seed {opts.seed}; {opts.examples} examples x {', '.join(opts.modes)}; max world {opts.max_world}; "
        f"backend {opts.backend}" + (f"; time budget {opts.time_budget:g} s" if opts.time_budget else "")
    )
    print(f"  repeat with: {replay_fuzz(opts)}", flush=True)
    outcome = _search_on_storage(opts, fuzz, Progress)
    code = _report(outcome)
    # the scenarios it judged, each kept in the run folder's cases/
    generated = sorted(glob.glob(os.path.join(outcome.run_dir, "cases", "*.yaml")))
    print_coverage(of_files(generated), outcome.run_dir, drawn=True)
    return code


def _options(args, FuzzOptions, backend):
    """The run's options, from the command line (`backend`: --backend resolved)."""
    return FuzzOptions(
        examples=args.examples,
        seed=args.seed,
        combos=args.combos or backend.combinations(),  # None: all six
        max_world=args.max_world,
        time_budget=args.time_budget,
        shrink_budget=args.shrink_budget,
        all_bugs=args.all_bugs,
        backend=args.backend,
        resolved=backend,
        backend_options=args.backend_options,
        precision_changes=args.precision_changes,
        io=args.io,
        storage=args.storage,
        endpoint_url=args.endpoint_url,
        out=args.out,
        modes=tuple(args.mode),
        faults=args.faults,
        max_steps=args.max_steps,
        profile=args.profile,
        workers=workers_of(args),
    )


def _refuse_bad_backend(opts, backend) -> None:
    """A backend that cannot be made, or --backend-options for one that declares none: one clear error, now."""
    backend.make((opts.combos or [_first_combo()])[0])  # a bad backend: one clear error, now
    if opts.backend_options:
        from ..errors import ConfigError

        if not backend.declared_options:
            raise ConfigError(
                "--backend-options",
                f"{opts.backend} declares no options",
                "leave --backend-options out, or give a backend such as dcp or megatron",
            )


def _search_on_storage(opts, fuzz, Progress):
    """_search with the run's object store open (and its backend checked to reach it) when --storage names one."""
    from ..objectstore.store import run_store

    if opts.storage is not None:
        from ..runner.io_route import resolve
        from ..runner.on_store import check_reaches
        from ..runner.scenario_model import Scenario

        check_reaches(Scenario("fuzz", [], storage=opts.storage), opts.resolved, resolve(opts.io, opts.resolved))
    with run_store(opts.storage, opts.endpoint_url):
        return _search(opts, fuzz, Progress)


def _search(opts, fuzz, Progress):
    """Run the fuzzer under a progress bar: each mode searching, then shrinking what it found."""
    from ..fuzz.judge import BAD

    shrinking: set[str] = set()  # the modes that found a failure and shrink it
    current: list[str] = []
    with Progress(opts.examples * len(opts.modes), "cases") as bar:

        def progress(mode, result):
            if current and current[-1] != mode and bar.phase_name:
                bar.phase(f"{mode}: searching")  # the previous mode's shrinking is over
            current[:] = [mode]
            if result is not None and result.verdict in BAD and mode not in shrinking:
                bar.note(f"  {mode}: {result.verdict} found ({result.combo}: {result.detail[:120]}); shrinking")
                bar.phase(f"{mode}: shrinking")  # as many cases as shrinking takes: no total
                shrinking.add(mode)
            bar.start(mode)
            bar.update(1, result.verdict if result is not None else "rejected")

        outcome = fuzz(opts, progress=progress)
    return outcome


def _report(outcome) -> int:
    """Print what the run found; 1 when anything failed, 0 otherwise."""
    from ..verdicts import summary_line

    verdicts = [v for v, n in outcome.counts.items() if v != "rejected" for _ in range(n)]
    rejected = outcome.counts.get("rejected", 0)
    print(
        f"{summary_line(verdicts) if verdicts else 'no cases'}"
        + (f"; {rejected} generated examples rejected" if rejected else "")
        + f" ({outcome.seconds:.1f} s)"
    )
    for mode, why in outcome.stopped.items():
        print(f"{mode}: stopped when its {why} was spent")
    for f in outcome.failures:
        print(f"{f.verdict} ({f.mode}, {f.kind}): {f.combo}: {f.detail[:300]}")
        flaky = " (timing-dependent: FLAKY)" if f.reproduced < f.replays else ""
        print(f"  reproduced {f.reproduced} of {f.replays} replays with the same seed{flaky}")
        print(f"  minimal scenario ({f.steps} step{'s' if f.steps != 1 else ''}): {f.scenario_file}")
        print(f"  replay: {f.replay}")
    for mode, classes in outcome.passed_over.items():
        told = ", ".join(f"{name} x{k}" for name, k in sorted(classes.items()))
        print(f"{mode}: also failed in other ways, not shrunk ({told}); --all-bugs shrinks each")
    for e in outcome.errors:
        print(f"error: {e[:1000]}")
    print(f"run folder: {outcome.run_dir}")
    if outcome.ok:
        print("no failure found")
        return 0
    # UNPROBED is not passed here as in every other command's summary, though it is not shrunk
    parts = []
    if outcome.failures:
        n = len(outcome.failures)
        parts.append(f"{n} failure{'s' if n != 1 else ''} shrunk to a minimal scenario")
    if outcome.errors:
        parts.append(f"{len(outcome.errors)} errors")
    if outcome.unprobed:
        n = outcome.unprobed
        parts.append(
            f"{n} case{'s' if n != 1 else ''} UNPROBED: a generated fault never fired, so nothing was tested "
            "(not passed; their scenarios are in the run folder's cases/)"
        )
    print("; ".join(parts))
    if outcome.unprobed:
        reasons = ", ".join(f"{why} x{k}" for why, k in outcome.gap_summary()["reasons"].items())
        print(f"gaps in the search (UNPROBED, not shrunk): {reasons}")
    return 1


def _first_combo():
    from ..vocab.combos import valid_combinations

    return valid_combinations()[0]


def _check(opts) -> None:
    """Bad --faults: one clear error before anything runs."""
    from ..fuzz.scenario_strategies import scenarios

    scenarios(
        combinations=opts.combos,
        max_world=opts.max_world,
        faults=opts.faults,
        max_steps=opts.max_steps,
        backend=opts.backend,
    )
