"""The `resilience` command: fault-injection and resilience tests for distributed checkpoints."""
from __future__ import annotations

import argparse
import contextlib
import importlib
import signal
import sys
import threading

from .commands import COMMANDS
from .errors import Interrupted, ResilienceError


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


def _raise_interrupted(signum, frame) -> None:
    raise Interrupted(signal.Signals(signum).name)


@contextlib.contextmanager
def stop_on_signals():
    """While in it, SIGTERM and SIGHUP end the command as Ctrl-C does, through every `finally` (rank
    teardown, the results so far), instead of killing it on the spot. The previous handlers come back after."""
    if threading.current_thread() is not threading.main_thread():  # only the main thread may set handlers
        yield
        return
    old = {sig: signal.signal(sig, _raise_interrupted) for sig in (signal.SIGTERM, signal.SIGHUP)}
    try:
        yield
    finally:
        for sig, handler in old.items():
            signal.signal(sig, handler)


def main(argv: list[str] | None = None) -> int:
    """Exit status: 0 all passed, 1 something failed, 2 bad input (one error, no traceback), 130 / 143
    stopped by SIGINT (Ctrl-C) / SIGTERM, 129 SIGHUP (the run folder keeps what finished, marked interrupted)."""
    args = build_parser().parse_args(argv)
    try:
        with stop_on_signals():
            return args.func(args)
    except (KeyboardInterrupt, Interrupted) as e:
        from .report.cases import exit_status, signal_name
        print(f"resilience {args.command}: interrupted by {signal_name(e)}", file=sys.stderr)
        return exit_status(e)
    except ResilienceError as e:
        print(f"resilience {args.command}: error: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
