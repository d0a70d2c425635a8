"""The `resilience` command: fault-injection and resilience tests for distributed checkpoints."""
from __future__ import annotations

import argparse
import importlib
import sys

from .commands import COMMANDS
from .errors import ResilienceError


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
    args = build_parser().parse_args(argv)
    try:
        return args.func(args)
    except ResilienceError as e:
        print(f"resilience {args.command}: error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(f"resilience {args.command}: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
