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
