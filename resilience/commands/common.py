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


def storage_arg(text: str) -> str:
    from ..objectstore.store import check_storage

    try:
        return check_storage(text)
    except ConfigError as e:
        raise argparse.ArgumentTypeError(str(e)) from None


def add_storage_arguments(p) -> None:
    """--storage and --endpoint-url: where the cases keep their checkpoints (resilience.objectstore.store)."""
    p.add_argument(
        "--storage",
        type=storage_arg,
        default=None,
        metavar="WHERE",
        help="where checkpoints go: local (files in each case's folder), s3 (an S3 server the run starts on "
        "127.0.0.1, a bucket per case, stopped at the end) or s3://bucket/prefix (a cluster's store at "
        "--endpoint-url, a prefix per case; credentials from AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY); "
        "default: the scenario's storage, else local",
    )
    p.add_argument(
        "--endpoint-url",
        default=None,
        metavar="URL",
        help="the S3 endpoint of --storage s3://bucket/prefix, http(s)://host:port (default: AWS_ENDPOINT_URL)",
    )


def on_storage(scenarios: list, storage: str | None) -> list:
    """The scenarios with `storage` (from --storage) in place of their own; as they are when it is None."""
    from dataclasses import replace

    return list(scenarios) if storage is None else [replace(s, storage=storage) for s in scenarios]


def run_stores(scenarios, endpoint_url: str | None):
    """The object stores the scenarios name, opened for the run (objectstore.store.run_store), each once."""
    import contextlib

    from ..objectstore.store import is_object_store, run_store

    stack = contextlib.ExitStack()
    wanted = list(dict.fromkeys(s.storage for s in scenarios if is_object_store(s.storage)))
    if endpoint_url is not None and not wanted:
        raise ConfigError(
            "--endpoint-url",
            "an endpoint was given, but no case keeps its checkpoints on S3",
            "add --storage s3://bucket/prefix, or leave --endpoint-url out",
        )
    with stack:  # opened one by one: a store that fails to open closes the ones before it
        for storage in wanted:
            stack.enter_context(run_store(storage, endpoint_url if storage.startswith("s3://") else None))
        return stack.pop_all()
