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
    from ..checkpoint.combos import Combination
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


def number_arg(kind, ok, what: str):
    """An argparse type: `kind(text)` that passes `ok`, else one error saying what was expected."""
    def parse(text: str):
        try:
            value = kind(text)
        except ValueError:
            value = None
        if value is None or not ok(value):
            raise argparse.ArgumentTypeError(f"must be {what}, got {text!r}")
        return value
    return parse


positive_int = number_arg(int, lambda v: v >= 1, "a positive integer")
nonnegative_int = number_arg(int, lambda v: v >= 0, "a non-negative integer")
positive_float = number_arg(float, lambda v: v > 0, "a positive number")
