"""Option parsers shared by the benchmarks: a bad value is one argparse error, not a traceback."""
from __future__ import annotations

import argparse


def _number(text: str, kind, ok, what: str):
    try:
        value = kind(text)
    except ValueError:
        value = None
    if value is None or not ok(value):
        raise argparse.ArgumentTypeError(f"must be {what}, got {text!r}")
    return value


def positive_int(text: str) -> int:
    return _number(text, int, lambda v: v >= 1, "a positive integer")


def nonnegative_int(text: str) -> int:
    return _number(text, int, lambda v: v >= 0, "a non-negative integer")


def positive_float(text: str) -> float:
    return _number(text, float, lambda v: v > 0, "a positive number")
