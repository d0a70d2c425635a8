"""The arguments of the strategies, checked when a strategy is built: a bad one raises
InvalidStrategyArgument (both hypothesis.errors.InvalidArgument and resilience's ConfigError), naming the
argument and the fix."""

from __future__ import annotations

from collections.abc import Sequence

from hypothesis.errors import InvalidArgument

from ..errors import ConfigError
from ..state import Topology


class InvalidStrategyArgument(ConfigError, InvalidArgument):
    """A strategy was given an argument it cannot draw from; names the argument and the fix."""


def fail(arg: str, problem: str, fix: str = "") -> InvalidStrategyArgument:
    return InvalidStrategyArgument(arg, problem, fix)


def check_int(name: str, value, minimum: int, maximum: int | None = None) -> None:
    if isinstance(value, bool) or not isinstance(value, int):
        raise fail(name, f"must be an integer, got {value!r}")
    if value < minimum or (maximum is not None and value > maximum):
        bound = f"between {minimum} and {maximum}" if maximum is not None else f"at least {minimum}"
        raise fail(name, f"must be {bound}, got {value}")


def as_topology(value, name: str) -> Topology:
    if isinstance(value, Topology):
        return value
    if isinstance(value, str):
        try:
            return Topology.parse(value)
        except ConfigError as e:
            raise fail(name, e.problem, e.fix) from None
    raise fail(name, f"must be a Topology or a string like 'tp2pp1dp1', got {value!r}")


def check_names(value, name: str, allowed: Sequence[str]) -> tuple[str, ...]:
    items = (value,) if isinstance(value, str) else tuple(value)
    for v in items:
        if v not in allowed:
            raise fail(name, f"unknown value {v!r}", f"use some of {', '.join(allowed)}")
    if not items:
        raise fail(name, "is empty", f"leave it out for all of {', '.join(allowed)}")
    return items
