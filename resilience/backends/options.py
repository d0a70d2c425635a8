"""The options a user of a checkpoint library can pick, declared by its adapter as data.

An adapter's factory carries `options`, a tuple of `Option` (read with its other traits by
resilience.backends.base.traits_of): each option's name, the values it allows, its default (as the library
has it), a one-line meaning, the saves it matters for (every save, or async saves only) and the values
that cannot work here, each with the reason. A backend spec names the
options after the backend (`dcp:thread_count=4,async=process`, `pkg.mod:factory[thread_count=4]`);
`runner.adapters` reads it, this module checks it against the declaration and hands the factory typed
keyword arguments. The matrix sweeps the declaration (`sweep`), the fuzzer draws from it.

Nothing here imports torch: a spec is read while pytest reads its options."""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from ..errors import ConfigError

NAME_RE = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
VALUE_RE = re.compile(r"[A-Za-z0-9_.+-]+")
TRUE, FALSE = ("true", "yes", "on", "1"), ("false", "no", "off", "0")


@dataclass(frozen=True)
class Option:
    """One choice a library's user makes. `choices` lists the allowed values (bools, names or ints);
    an integer option may instead allow a range `between` (low, high). `sweep` lists the non-default
    values a sweep tries (default: every other choice that can work here). `io` is "async" for an option
    only async saves read (a sweep runs it on async combinations only). `refused` maps a value that cannot
    work on this machine (CPU, gloo) to the reason."""

    name: str
    default: Any
    meaning: str
    choices: tuple = ()
    between: tuple[int, int] | None = None
    sweep: tuple = ()
    io: str | None = None
    refused: Mapping[Any, str] = field(default_factory=dict)

    def allowed(self) -> str:
        """The allowed values as a user writes them."""
        if self.between is not None:
            return f"an integer from {self.between[0]} to {self.between[1]}"
        return ", ".join(show(c) for c in self.choices)

    def parse(self, text: str, where: str = "backend") -> Any:
        """`text` as this option's value; ConfigError naming the option, its allowed values and the fix."""
        value = self._read(text)
        if value is None:
            raise ConfigError(
                where,
                f"option {self.name}={text!r} is not allowed ({self.meaning})",
                f"give {self.name}= one of: {self.allowed()}; default {show(self.default)}",
            )
        if value in self.refused:
            runnable = ", ".join(show(c) for c in self.choices if c not in self.refused)
            raise ConfigError(
                where,
                f"option {self.name}={show(value)} cannot run here: {self.refused[value]}",
                f"leave it out, or pick one of: {runnable}",
            )
        return value

    def _read(self, text: str) -> Any:
        t = text.strip().lower()
        if isinstance(self.default, bool):
            return True if t in TRUE else False if t in FALSE else None
        if isinstance(self.default, int):
            try:
                n = int(t, 10)
            except ValueError:
                return None
            if self.between is not None:
                return n if self.between[0] <= n <= self.between[1] else None
            return n if n in self.choices else None
        return next((c for c in self.choices if str(c).lower() == t), None)

    def sweep_values(self) -> tuple:
        """The non-default values a sweep tries, one at a time."""
        values = self.sweep or tuple(c for c in self.choices if c != self.default)
        return tuple(v for v in values if v != self.default and v not in self.refused)


def show(value: Any) -> str:
    """A value as a spec writes it."""
    return ("true" if value else "false") if isinstance(value, bool) else str(value)


def split_spec(text: str, aliases: Iterable[str] = ()) -> tuple[str, dict[str, str]]:
    """(the backend without options, {option: value as written}). Two spellings: `ALIAS:k=v,...` for an
    alias, and `NAME[k=v,...]` for any name ('pkg.mod:factory[thread_count=4]'). Syntax only: the names
    and values are checked against the factory's declaration by `resolve_options`."""
    text = text.strip()
    if text.endswith("]") and "[" in text:
        base, _, inner = text[:-1].partition("[")
        return base, _pairs(inner, text)
    head, sep, rest = text.partition(":")
    if sep and head in set(aliases):
        return head, _pairs(rest, text)
    return text, {}


def _pairs(inner: str, spec: str) -> dict[str, str]:
    out: dict[str, str] = {}
    for part in inner.split(","):
        name, eq, value = (s.strip() for s in part.partition("="))
        if not eq or not NAME_RE.fullmatch(name) or not VALUE_RE.fullmatch(value):
            raise ConfigError(
                "backend",
                f"cannot read option {part.strip()!r} in {spec!r}",
                "write options as name=value separated by commas, e.g. dcp:thread_count=4,async=process",
            )
        if name in out:
            raise ConfigError("backend", f"option {name} given twice in {spec!r}", "give each option once")
        out[name] = value
    return out


def join_spec(base: str, options: Mapping[str, Any], *, alias: bool) -> str:
    """The spec of `base` with `options` (in the order given), in the spelling split_spec reads."""
    if not options:
        return base
    inner = ",".join(f"{k}={show(v)}" for k, v in options.items())
    return f"{base}:{inner}" if alias else f"{base}[{inner}]"


def resolve_options(declared: Sequence[Option], given: Mapping[str, str], backend: str) -> dict[str, Any]:
    """{name: typed value} for the options `given`, in declaration order; ConfigError for an option the
    backend does not declare or a value it does not allow."""
    by_name = {o.name: o for o in declared}
    for name in given:
        if name not in by_name:
            known = ", ".join(by_name) if by_name else "none: it takes no options"
            raise ConfigError(
                "backend",
                f"{backend} has no option {name!r}",
                f"its options are {known} (`resilience options {backend}` lists them)",
            )
    return {o.name: o.parse(given[o.name]) for o in declared if o.name in given}


@dataclass(frozen=True)
class OptionSet:
    """One column of a sweep: the options changed from the defaults (empty: the defaults) and the io
    kinds of save it applies to (None: every combination)."""

    options: Mapping[str, Any]
    io: str | None = None

    @property
    def label(self) -> str:
        return ",".join(f"{k}={show(v)}" for k, v in self.options.items()) or "defaults"


def sweep(declared: Sequence[Option], only: Sequence[str] | None = None) -> list[OptionSet]:
    """The defaults, then each non-default value of each option (of `only`, when given) one at a time
    against the defaults. Values refused here are left out (their option says why)."""
    names = {o.name for o in declared}
    for name in only or ():
        if name not in names:
            raise ConfigError(
                "--backend-options",
                f"no option {name!r}",
                f"give 'all' or option names: {', '.join(names) or '(none declared)'}",
            )
    sets = [OptionSet({})]
    for o in declared:
        if only and o.name not in only:
            continue
        sets += [OptionSet({o.name: v}, o.io) for v in o.sweep_values()]
    return sets


def describe(declared: Sequence[Option]) -> list[str]:
    """One line per option: name, allowed values, default, what it means, and what cannot run here."""
    lines = []
    for o in declared:
        line = f"{o.name}: {o.allowed()} (default {show(o.default)}){' [async saves]' if o.io else ''} - {o.meaning}"
        for value, reason in o.refused.items():
            line += f"; {show(value)} refused here: {reason}"
        lines.append(line)
    return lines
