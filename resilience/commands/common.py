"""Argument parsers shared by the subcommands: each turns bad input into one clear usage error."""

from __future__ import annotations

import argparse

from ..errors import ConfigError


def topology_arg(text: str):
    from ..state import Topology

    try:
        return Topology.parse(text)
    except ConfigError as e:
        raise argparse.ArgumentTypeError(str(e)) from None


def combination_arg(text: str):
    from ..vocab.combos import Combination

    try:
        return Combination.parse(text)
    except ConfigError as e:
        raise argparse.ArgumentTypeError(str(e)) from None


def transition_arg(text: str):
    from ..state import Transition

    try:
        return Transition.parse(text)
    except ConfigError as e:
        raise argparse.ArgumentTypeError(str(e)) from None


def add_io_argument(p) -> None:
    """--io: the way in-process faults reach the implementation under test (resilience.runner.io_route)."""
    p.add_argument(
        "--io",
        choices=("seam", "fuse", "auto"),
        default=None,
        help="how faults reach the implementation's I/O: seam (in process, through resilience.storage), "
        "fuse (a fault-injecting file system mounted over the checkpoint folder: every writer, "
        "forked or not, Python or not) or auto (the seam for the reference and backends that declare "
        "io_through_seam, the file system otherwise); default: the scenario's io, else auto",
    )


MAX_DEFAULT_WORKERS = 8  # a case's ranks hold a few hundred MB each: not one case per core of a big node


def add_workers_argument(p) -> None:
    """--workers: how many cases run at once (launch.workers), each in a process forked from this one."""
    p.add_argument(
        "--workers",
        type=positive_int,
        default=None,
        metavar="N",
        help="cases run at once, each in a worker process forked from this one (default: the usable CPUs, "
        f"at most {MAX_DEFAULT_WORKERS}); 1 runs them one after the other in this process",
    )


def add_repeat_argument(p) -> None:
    """--repeat: runs of each case with the same seed (runner.repeats); verdicts that differ are FLAKY."""
    from ..runner.repeats import MAX_REPEAT

    p.add_argument(
        "--repeat",
        type=number_arg(int, lambda v: 1 <= v <= MAX_REPEAT, f"a whole number of runs from 1 to {MAX_REPEAT}"),
        default=1,
        metavar="N",
        help="run each case N times with the same seed, each run in its own folder (CASE/repeat-K); a case "
        "whose runs give different verdicts is FLAKY, a failure: its behaviour depends on timing "
        "(default: 1)",
    )


def workers_of(args) -> int:
    from ..launch.workers import usable_cpus

    return args.workers or min(usable_cpus(), MAX_DEFAULT_WORKERS)


def number_arg(kind, ok, what: str):
    """An argparse type: `kind(text)` that passes `ok`, else one error saying what was expected."""

    def parse(text: str):
        try:
            value = kind(text)
        except (ValueError, OverflowError):
            value = None
        if value is None or not ok(value):
            raise argparse.ArgumentTypeError(f"must be {what}, got {text!r}")
        return value

    return parse


MAX_SECONDS = 7 * 24 * 3600.0  # the ceiling of every duration on the command line: a week
MAX_SEED = 2**32 - 1  # seeds as the fuzzer draws them; larger ones overflow torch's generators

positive_int = number_arg(int, lambda v: v >= 1, "a positive integer")
nonnegative_int = number_arg(int, lambda v: v >= 0, "a non-negative integer")
positive_float = number_arg(
    float, lambda v: 0 < v <= MAX_SECONDS, f"a positive number of seconds, at most {MAX_SECONDS:g} (a week)"
)
seconds = positive_float
seed_arg = number_arg(int, lambda v: 0 <= v <= MAX_SEED, f"an integer from 0 to {MAX_SEED}")


def print_coverage(coverage, run_dir: str, *, drawn: bool = False) -> None:
    """The run's coverage (a runner.coverage.Coverage) printed, and kept in the run folder as coverage.json;
    `drawn`: the scenarios were generated, so the corners not reached are the ones never drawn."""
    text = coverage.render()
    print(text.replace("corners never reached", "corners never drawn") if drawn else text)
    why = coverage.keep(run_dir)
    if why:
        print(f"coverage.json not written: {why}")
