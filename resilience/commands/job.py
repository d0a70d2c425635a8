"""`resilience job [options] -- COMMAND...`: a team's unmodified training command, run as a black box
under faults, restarted as a scheduler would, and judged against a golden run that never stopped.

Without --matrix or --column it makes the golden run only (the command twice, through the mount) and
says what the columns would aim at: a dry run that checks the command, its output patterns and its
checkpoint folder."""

from __future__ import annotations

import argparse
import sys

from ..errors import ConfigError
from .common import nonnegative_int, number_arg, positive_int, seconds


def register(sub) -> None:
    from ..job.columns import COLUMNS
    from ..job.command import MAX_NODES
    from ..job.options import GOLDEN_TIMEOUT, MAX_STATES, TERM_GRACE

    p = sub.add_parser(
        "job",
        help="run an unmodified training command under faults, restarting it, against a golden run",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--matrix", action="store_true", help="run every fault column and print the table")
    _fuzz_options(p)
    p.add_argument(
        "--column",
        action="append",
        default=[],
        metavar="NAME",
        help=f"run this column (repeatable): {', '.join(COLUMNS)}",
    )
    p.add_argument(
        "--ckpt-dir",
        metavar="PATH",
        help="the folder the job hard-codes for its checkpoints: the mount is made there (default: a folder of "
        "each case, given to the job as {ckpt} in the command and as RESILIENCE_CKPT_DIR)",
    )
    _pattern_options(p)
    p.add_argument(
        "--rtol",
        type=number_arg(float, lambda v: 0 <= v < 1, "a relative tolerance from 0 to 1"),
        default=0.0,
        help="how far a loss may be from the golden one (default 0: exact; needed for a job that is not deterministic)",
    )
    _restart_options(p)
    p.add_argument(
        "--max-states",
        type=number_arg(int, lambda v: 1 <= v <= 1024, "a number of crash states from 1 to 1024"),
        default=MAX_STATES,
        help=f"crash states of the folder the power-loss column restarts the job on (default {MAX_STATES})",
    )
    p.add_argument(
        "--term-grace",
        type=seconds,
        default=TERM_GRACE,
        help=f"seconds the sigterm column gives the job after SIGTERM before SIGKILL, and node-kill the nodes left "
        f"to end on their own (default {TERM_GRACE:g})",
    )
    p.add_argument(
        "--nodes",
        type=number_arg(int, lambda v: 1 <= v <= MAX_NODES, f"a number of nodes from 1 to {MAX_NODES}"),
        default=1,
        help="start the command this many times, as nodes of one job on 127.0.0.1 (torchrun's PET_NNODES, "
        "PET_NODE_RANK, PET_MASTER_ADDR, PET_MASTER_PORT; {node}, {nnodes}, {port} in the command); default 1",
    )
    p.add_argument(
        "--timeout", type=seconds, help="seconds one run of a case may take (default: 3x the golden run, at least 30)"
    )
    p.add_argument(
        "--golden-timeout",
        type=seconds,
        default=GOLDEN_TIMEOUT,
        help=f"seconds one golden run may take (default {GOLDEN_TIMEOUT:g})",
    )
    p.add_argument("--golden", metavar="DIR", help="reuse the golden run of an earlier run (its golden/ folder)")
    p.add_argument("--out", default="runs", help="where the run folder goes (default: runs/)")
    p.add_argument(
        "job_command", nargs=argparse.REMAINDER, metavar="COMMAND", help="-- then the training command, with {ckpt}"
    )
    p.set_defaults(func=run)


def _restart_options(p) -> None:
    from ..job.options import MAX_RESTARTS, RUNNER, TORCHRUN

    p.add_argument(
        "--max-restarts",
        type=nonnegative_int,
        default=MAX_RESTARTS,
        help=f"restarts after the fault, as a scheduler allows (default {MAX_RESTARTS})",
    )
    p.add_argument(
        "--restarts-by",
        choices=(RUNNER, TORCHRUN),
        default=RUNNER,
        help="who restarts the job after a fault: the runner starts the command again, as a scheduler does "
        "(default); torchrun restarts its own workers (its --max-restarts, given as PET_MAX_RESTARTS)",
    )


def _pattern_options(p) -> None:
    p.add_argument(
        "--metric",
        action="append",
        metavar="REGEX",
        help="a metric line, with named groups step and loss "
        "(default: 'step N loss X', torchtitan's and Megatron-LM's)",
    )
    p.add_argument(
        "--ack", action="append", metavar="REGEX", help="a line acknowledging a save, with a named group step"
    )
    p.add_argument(
        "--resumed",
        action="append",
        metavar="REGEX",
        help="the line saying where the job resumed, with a named group step (default: 'resumed from step N', "
        "Megatron-LM's and torchtitan's; else the step before the first one a restarted run reports)",
    )


def _fuzz_options(p) -> None:
    p.add_argument(
        "--fuzz",
        action="store_true",
        help="draw fault schedules (column, save, rank, byte, restarts) with Hypothesis and shrink the first failure",
    )
    p.add_argument("--examples", type=positive_int, default=20, help="schedules --fuzz draws (default 20)")
    p.add_argument("--seed", type=nonnegative_int, help="seed of --fuzz (default: a random one, printed)")
    p.add_argument(
        "--shrink-budget",
        type=seconds,
        default=600.0,
        help="seconds --fuzz may spend shrinking a failure (default 600)",
    )


def run(args) -> int:
    from ..job.command import JobCommand
    from ..job.options import JobOptions
    from ..report.matrix_table import text_table
    from .run import summarize

    command = list(args.job_command)
    if command[:1] == ["--"]:
        command = command[1:]
    if not command:
        raise ConfigError("command", "no training command", "put it after --: resilience job -- torchrun train.py ...")
    options = JobOptions(
        JobCommand.parse(command, ckpt_dir=args.ckpt_dir, out=args.out, nodes=args.nodes),
        tuple(args.metric or ()),
        tuple(args.ack or ()),
        tuple(args.resumed or ()),
        args.rtol,
        args.max_restarts,
        args.timeout,
        args.golden_timeout,
        args.out,
        tuple(args.column),
        args.matrix,
        args.golden,
        args.max_states,
        args.term_grace,
        args.restarts_by,
    )
    if args.fuzz:
        if args.matrix or args.column:
            raise ConfigError("--fuzz", "draws its own columns", "give --fuzz without --matrix or --column")
        return _fuzz(options, args)
    from ..job.matrix import run_job

    done = run_job(options)
    golden = done.reference.golden
    print(
        f"golden: {len(golden.curve)} steps to step {golden.last_step}, saves acknowledged at {list(golden.acks)}, "
        f"{' and '.join(f'{s:.1f}' for s in golden.seconds)} s"
    )
    if not done.rows:
        from ..job.columns import COLUMNS, plan_for

        print(f"layout: {done.reference.layout.describe()}")
        for name in COLUMNS:  # what each column would do to this job
            plan = plan_for(name, done.reference)
            print(f"  {name}: {plan.what if plan.na is None else 'N/A: ' + plan.na}")
        print(f"no column run (give --matrix or --column NAME); golden run kept in {done.reference.folder}")
        return 0
    print(text_table(done.rows, done.columns))
    case = [r.seconds for r in done.rows if r.seconds]
    mean = sum(case) / len(case) if case else 0.0
    print(f"({done.seconds:.1f} s: golden {done.golden_seconds:.1f} s, a case {mean:.1f} s on average)")
    sys.stdout.flush()
    return summarize(done.rows, done.paths)


def _fuzz(options, args) -> int:
    import random

    from ..job.matrix import fuzz_job
    from .run import summarize

    seed = args.seed if args.seed is not None else random.randrange(2**32)
    print(f"fuzz: seed {seed}; {args.examples} schedules of {options.command.shell()}", flush=True)
    print(f"  repeat with: resilience job --fuzz --seed {seed} --examples {args.examples} -- {options.command.shell()}")
    done = fuzz_job(options, examples=args.examples, seed=seed, shrink_budget=args.shrink_budget)
    out = done.outcome
    gaps = ", ".join(f"{n} {v}" for v, n in out.gaps.items()) or "none"
    print(f"{len(out.rows)} cases in {out.seconds:.1f} s; {out.failures} failed; gaps in the search: {gaps}")
    if out.minimal is not None and out.minimal_schedule is not None:
        row, sched = out.minimal, out.minimal_schedule
        print(f"FAIL (minimal schedule: {sched.spec()}, restarts {sched.restarts}): {row.detail[:600]}")
        print(f"  replay: {row.replay}")
    else:
        print("no failure found")
    summarize(out.rows, done.paths)
    return 1 if out.minimal is not None else 0
