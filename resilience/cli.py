"""The `resilience` command: fault-injection and resilience tests for distributed checkpoints."""

from __future__ import annotations

import argparse
import importlib
import sys

from .commands import COMMANDS
from .errors import Interrupted, ResilienceError
from .launch import heap
from .stopping import INTERRUPTED_STATUSES, ignore_stops, stop_on_signals, taken


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="resilience", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for name in COMMANDS:
        try:
            module = importlib.import_module(f".commands.{name}", __package__)
        except ModuleNotFoundError as e:
            if e.name and e.name.endswith(f"commands.{name}"):
                continue  # not written yet
            raise
        module.register(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    """Exit status: 0 all passed, 1 something failed, 2 bad input (one error, no traceback), 130 / 143
    stopped by SIGINT (Ctrl-C) / SIGTERM, 129 SIGHUP (the run folder keeps what finished, marked interrupted)."""
    args = build_parser().parse_args(argv)
    try:
        with stop_on_signals():
            return args.func(args)
    except (KeyboardInterrupt, Interrupted) as e:
        taken()
        from .runner.case_loop import exit_status, signal_name

        print(f"resilience {args.command}: interrupted by {signal_name(e)}", file=sys.stderr)
        return exit_status(e)
    except ResilienceError as e:
        print(f"resilience {args.command}: error: {e}", file=sys.stderr)
        return 2


def run() -> None:
    """The console command: `main`, then exit with its status. Once a stop was acted on, a late or repeated
    signal is ignored while the interpreter shuts down: the status stays the one the run printed."""
    heap.manage()
    status = main()
    heap.leaving()
    if status in INTERRUPTED_STATUSES:
        ignore_stops()
        # CPython notes a KeyboardInterrupt that left an exec() of source text (Hypothesis and dataclasses
        # build functions so) and, at exit, kills itself by SIGINT in place of our status; the next exec()
        # of text clears that note
        exec("pass")
    sys.exit(status)


if __name__ == "__main__":
    run()
