"""Observation without code changes: the job's output lines read for its metric curve, its acknowledged
saves and its resume point.

Built in (tried in order; a pattern given on the command line replaces the built-ins of its kind):

| kind    | pattern                                                         | whose                             |
|---------|-----------------------------------------------------------------|-----------------------------------|
| metric  | `[resilience] step N loss X rank R state HEX`                   | `resilience.job.report` (hook.py) |
| metric  | `step N loss X`                                                 | the example jobs                  |
| metric  | `step: N  loss: X`                                              | torchtitan's logger               |
| metric  | `iteration N/ M | ... | lm loss: X |`                           | Megatron-LM's training log        |
| ack     | `saved checkpoint step N`                                       | the example jobs                  |
| ack     | `successfully saved checkpoint from iteration N to ...`         | Megatron-LM                       |
| resumed | `resumed from step N`                                           | the example jobs                  |
| resumed | `successfully loaded checkpoint from ... at iteration N`        | Megatron-LM                       |
| resumed | `Loading the checkpoint at step N`                              | torchtitan                        |

A metric pattern has the named groups `step` and `loss` (others are kept beside them); ack and resumed
patterns have `step`. Colour codes are taken out of a line before it is matched. Without a resume line,
the resume point is the step before the first one the restarted job reports."""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass

from ..errors import ConfigError
from .base import Observed, Point, Said

_NUMBER = r"[-+]?(?:\d+\.?\d*(?:[eE][-+]?\d+)?|\.\d+(?:[eE][-+]?\d+)?|nan|inf|NaN|Inf)"
HOOK = (  # resilience.job.report's line, before the plain one it would also match
    rf"\[resilience\] step (?P<step>\d+) loss (?P<loss>{_NUMBER}) rank (?P<rank>\d+) state (?P<digest>[0-9a-f]{{64}}|-)"
)
METRICS = (
    HOOK,
    rf"\bstep\s+(?P<step>\d+)\s+loss\s+(?P<loss>{_NUMBER})",
    rf"\bstep:\s*(?P<step>\d+)\s+loss:\s*(?P<loss>{_NUMBER})",
    rf"\biteration\s+(?P<step>\d+)\s*/\s*\d+\s*\|.*?\blm loss:\s*(?P<loss>{_NUMBER})",
)
ACKS = (
    r"\bsaved checkpoint step\s+(?P<step>\d+)",
    r"\bsuccessfully saved checkpoint from iteration\s+(?P<step>\d+)",
)
RESUMED = (
    r"\bresumed from step\s+(?P<step>\d+)",
    r"\bsuccessfully loaded checkpoint from .*? at iteration\s+(?P<step>\d+)",
    r"\bLoading the checkpoint (?:at|from) step\s+(?P<step>\d+)",
)
BUILT_IN = "'step N loss X'; torchtitan's 'step: N  loss: X'; Megatron-LM's 'iteration N/ M | ... | lm loss: X'"
_ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")
HEAD_LINES = 20  # lines kept from the start of a run's output, for errors that show them
TAIL_LINES = 40  # and from its end, for the evidence of a failure


@dataclass(frozen=True)
class Patterns:
    """The compiled patterns of each kind, and whether each came from the command line."""

    metric: tuple[re.Pattern, ...]
    ack: tuple[re.Pattern, ...]
    resumed: tuple[re.Pattern, ...]
    given: frozenset[str] = frozenset()  # kinds given on the command line

    @classmethod
    def from_options(
        cls, metric: Iterable[str] | None = None, ack: Iterable[str] | None = None, resumed: Iterable[str] | None = None
    ) -> Patterns:
        """The built-ins, each kind replaced by the patterns given for it; a pattern that does not compile
        or lacks a group is one ConfigError naming the option."""
        given = frozenset(k for k, v in (("metric", metric), ("ack", ack), ("resumed", resumed)) if v)
        return cls(
            _compiled("--metric", metric or METRICS, ("step", "loss")),
            _compiled("--ack", ack or ACKS, ("step",)),
            _compiled("--resumed", resumed or RESUMED, ("step",)),
            given,
        )

    def to_dict(self) -> dict:
        return {k: [p.pattern for p in getattr(self, k)] for k in ("metric", "ack", "resumed")}


def _compiled(option: str, texts: Iterable[str], groups: tuple[str, ...]) -> tuple[re.Pattern, ...]:
    out = []
    for text in texts:
        try:
            pattern = re.compile(text)
        except re.error as e:
            raise ConfigError(option, f"{text!r} is not a regular expression: {e}", "check its brackets") from None
        for g in groups:
            if g not in pattern.groupindex:
                raise ConfigError(
                    option,
                    f"{text!r} has no named group {g!r}",
                    f"name it with (?P<{g}>...), e.g. " + r"'step (?P<step>\d+) loss (?P<loss>\S+)'",
                )
        out.append(pattern)
    return tuple(out)


class Reader:
    """Reads one run's output line by line into an Observed; each line's findings are returned as they come,
    so a runner can act on them while the job runs."""

    def __init__(self, patterns: Patterns):
        self.patterns = patterns
        self.observed = Observed()

    def feed(self, raw: str) -> list[tuple[str, int]]:
        """One line of output: [(kind, step)] it says ("metric", "ack", "resumed")."""
        obs = self.observed
        obs.lines += 1
        line = _ANSI.sub("", raw.rstrip("\r\n"))
        if len(obs.head) < HEAD_LINES:
            obs.head.append(line)
        obs.tail.append(line)
        if len(obs.tail) > TAIL_LINES:
            del obs.tail[0]
        found: list[tuple[str, int]] = []
        point = _metric(self.patterns.metric, line, obs.lines)
        if point is not None:
            obs.points.append(point)
            found.append(("metric", point.step))
        for kind, pats in (("ack", self.patterns.ack), ("resumed", self.patterns.resumed)):
            m = _first(pats, line)
            if m is None:
                continue
            said = Said(int(m.group("step")), obs.lines, line.strip()[:300])
            if kind == "ack":
                obs.acks.append(said)
            elif obs.resumed is None:
                obs.resumed = said
            found.append((kind, said.step))
        return found


def _first(patterns: tuple[re.Pattern, ...], line: str) -> re.Match | None:
    for p in patterns:
        m = p.search(line)
        if m is not None:
            return m
    return None


def _metric(patterns: tuple[re.Pattern, ...], line: str, number: int) -> Point | None:
    m = _first(patterns, line)
    if m is None:
        return None
    try:
        step, loss = int(m.group("step")), float(m.group("loss"))
    except (TypeError, ValueError):
        return None
    extra = tuple((k, v) for k, v in m.groupdict().items() if k not in ("step", "loss") and v is not None)
    return Point(step, loss, number, extra)


def read_lines(patterns: Patterns, lines: Iterable[str]) -> Observed:
    """An Observed of a whole output at once."""
    reader = Reader(patterns)
    for line in lines:
        reader.feed(line)
    return reader.observed


__all__ = ["ACKS", "BUILT_IN", "METRICS", "RESUMED", "Patterns", "Reader", "read_lines"]
