"""Faults as data: small frozen records (kind, target, trigger, seed) read from YAML/JSON and printed in one line.

Three layers use them: the in-process injector (errors, short/torn/slow writes, crashes, lost unsynced
writes), the external nemesis (kill or stop rank processes) and corruption at rest (damage files of a
committed checkpoint). Every record checks itself and names the bad field in a ConfigError."""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, fields
from typing import Any, ClassVar, Protocol, runtime_checkable

from ..errors import ConfigError
from ..triggers import matches_path
from ..vocab.phases import PHASES

# Operations of the I/O seam a fault can match ("create" is open_write, "read" is open_read).
OPS = ("create", "write", "fsync", "close", "fsync_dir", "rename", "exchange", "mkdir", "unlink", "rmtree", "read")
# Requests to an object store a fault can match (objectstore.requests names each one): an object written
# whole, copied on the server, a multipart upload's steps, reads, listings, deletes; `bucket` is any other.
HTTP_OPS = (
    "put",
    "copy",
    "mpu_create",
    "mpu_part",
    "mpu_complete",
    "mpu_abort",
    "get",
    "head",
    "list",
    "delete",
    "bucket",
)
THREADS = ("main", "writer")  # writer: any thread but the main one (the async background writer)
WHEN = ("before", "after")
LAYERS = ("inject", "nemesis", "at_rest")


@dataclass(frozen=True)
class Target:
    """Where a fault strikes. None means any (any rank, any path, any op, any thread, newest iteration)."""

    rank: int | tuple[int, ...] | None = None  # one rank or several; None: every rank (nemesis: the whole job)
    path: str | None = None  # glob, see matches_path
    op: str | None = None  # one of the kind's `ops`: OPS (a file's), HTTP_OPS (an object store's request)
    thread: str | None = None  # "main" or "writer" (injector)
    iteration: int | None = None  # which checkpoint is damaged at rest; None: the newest
    offset: int | None = None  # byte offset in the file (at rest); None: drawn from the seed

    def has_rank(self, rank: int) -> bool:
        if self.rank is None:
            return True
        return rank in self.rank if isinstance(self.rank, tuple) else rank == self.rank

    def ranks(self, world: int) -> list[int]:
        return [r for r in range(world) if self.has_rank(r)]


@dataclass(frozen=True)
class Trigger:
    """When a fault strikes."""

    nth: int = 1  # the nth matching operation, file or phase (1-based)
    when: str = "before"  # crash before or after the matching operation
    at_byte: int | None = None  # crash once a matching file holds this many bytes
    phase: str | None = None  # crash as the save reaches this named phase (vocab.phases)
    after: float | None = None  # nemesis: seconds after it started
    size: int | None = None  # nemesis: once a matching file reaches this many bytes


_TARGET_KEYS = tuple(f.name for f in fields(Target))
_TRIGGER_KEYS = tuple(f.name for f in fields(Trigger))
_BASE_KEYS = ("kind", "target", "trigger", "seed")


@dataclass(frozen=True)
class Fault:
    """A fault: what (kind and its parameters), where (target), when (trigger), and a seed for any
    choice left open. Subclasses add parameters; `uses` says which target/trigger fields mean something;
    `effect` what a carrier of in-process faults does when it fires (resilience.triggers.EFFECTS; None:
    no carrier meets it on the I/O, the nemesis or the runner carries it out); `ops` the operations its
    target.op may name."""

    kind: ClassVar[str] = ""
    layer: ClassVar[str] = "inject"
    effect: ClassVar[str | None] = None
    uses: ClassVar[frozenset[str]] = frozenset()
    ops: ClassVar[tuple[str, ...]] = OPS
    target: Target = field(default_factory=Target)
    trigger: Trigger = field(default_factory=Trigger)
    seed: int = 0

    # ---- serialisation ---------------------------------------------------------------------------
    @classmethod
    def params(cls) -> tuple[str, ...]:
        return tuple(f.name for f in fields(cls) if f.name not in _BASE_KEYS)

    def to_dict(self) -> dict:
        """YAML/JSON-ready; defaults left out of target and trigger."""
        out: dict[str, Any] = {"kind": self.kind}
        for name in self.params():
            v = getattr(self, name)
            out[name] = list(v) if isinstance(v, tuple) else v
        for key, obj, default in (("target", self.target, Target()), ("trigger", self.trigger, Trigger())):
            d = {f.name: getattr(obj, f.name) for f in fields(obj) if getattr(obj, f.name) != getattr(default, f.name)}
            if d:
                out[key] = {k: list(v) if isinstance(v, tuple) else v for k, v in d.items()}
        out["seed"] = self.seed
        return out

    @classmethod
    def from_dict(cls, d: Mapping, *, world: int | None = None, where: str = "fault") -> Fault:
        """Read a record; target/trigger keys may also be given at the top level."""
        return fault_from_dict(d, world=world, where=where)

    def __str__(self) -> str:
        parts = [self.kind]
        d = self.to_dict()
        for name in self.params():
            parts.append(f"{name}={_show(getattr(self, name))}")
        for key in ("target", "trigger"):
            parts += [f"{k}={_show(v)}" for k, v in d.get(key, {}).items()]
        parts.append(f"seed={self.seed}")
        return " ".join(parts)

    # ---- validation ------------------------------------------------------------------------------
    def check(self, *, world: int | None = None, where: str = "fault") -> Fault:
        """Raise ConfigError naming the field if this record cannot be carried out; return self."""
        t, g = self.target, self.trigger
        for obj, prefix, default in ((t, "target", Target()), (g, "trigger", Trigger())):
            for f in fields(obj):
                if getattr(obj, f.name) != getattr(default, f.name) and f.name not in self.uses:
                    raise ConfigError(
                        f"{where}.{prefix}.{f.name}",
                        f"{self.kind} does not use {f.name}",
                        f"{self.kind} uses: {', '.join(sorted(self.uses)) or 'none of them'}",
                    )
        _int(self.seed, f"{where}.seed", minimum=None)
        if t.rank is not None:
            ranks = t.rank if isinstance(t.rank, tuple) else (t.rank,)
            if not ranks:
                raise ConfigError(f"{where}.target.rank", "empty list of ranks", "leave it out for every rank")
            for r in ranks:
                _int(r, f"{where}.target.rank", minimum=0)
                if world is not None and r >= world:
                    raise ConfigError(
                        f"{where}.target.rank",
                        f"rank {r} is out of range for world size {world}",
                        f"use 0..{world - 1}",
                    )
        if t.path is not None and (not isinstance(t.path, str) or not t.path):
            raise ConfigError(f"{where}.target.path", f"must be a non-empty glob, got {t.path!r}")
        _choice(t.op, self.ops, f"{where}.target.op")
        _choice(t.thread, THREADS, f"{where}.target.thread")
        _int(t.iteration, f"{where}.target.iteration", minimum=0)
        _int(t.offset, f"{where}.target.offset", minimum=0)
        _int(g.nth, f"{where}.trigger.nth", minimum=1)
        _choice(g.when, WHEN, f"{where}.trigger.when")
        _int(g.at_byte, f"{where}.trigger.at_byte", minimum=0)
        _choice(g.phase, PHASES, f"{where}.trigger.phase")
        _number(g.after, f"{where}.trigger.after", minimum=0.0)
        _int(g.size, f"{where}.trigger.size", minimum=0)
        self._check(where)
        return self

    def _check(self, where: str) -> None:
        """Kind-specific checks."""

    def __init_subclass__(cls, **kw):
        super().__init_subclass__(**kw)
        if cls.kind:
            KINDS[cls.kind] = cls


@runtime_checkable
class FaultLayer(Protocol):
    """Something that carries faults out: the injector, the nemesis, corruption at rest. `faults` are the
    records it was given; `firings` what actually happened, so a fault that never fired is visible."""

    faults: list[Fault]

    def firings(self) -> list[dict]: ...


# kind -> record class, filled as each class is defined. The package imports faults/kinds.py (its
# __init__), so every kind of the package is here once any module of it is imported; this module never
# imports kinds.py itself (kinds.py builds on it).
KINDS: dict[str, type[Fault]] = {}


# ---- parsing ---------------------------------------------------------------------------------------
def fault_from_dict(d: Mapping, *, world: int | None = None, where: str = "fault") -> Fault:
    """One record from a mapping (YAML/JSON); ConfigError naming the field when it is wrong."""
    if not isinstance(d, Mapping):
        raise ConfigError(where, f"must be a mapping with a kind, got {type(d).__name__}")
    kind = d.get("kind")
    if kind not in KINDS:
        raise ConfigError(f"{where}.kind", f"unknown fault kind {kind!r}", f"use one of {', '.join(KINDS)}")
    cls = KINDS[kind]
    params = cls.params()
    target = _sub(d.get("target"), Target, _TARGET_KEYS, f"{where}.target")
    trigger = _sub(d.get("trigger"), Trigger, _TRIGGER_KEYS, f"{where}.trigger")
    kwargs: dict[str, Any] = {}
    for key, value in d.items():
        if key in ("kind", "target", "trigger"):
            continue
        if key == "seed" or key in params:
            kwargs[key] = tuple(value) if isinstance(value, list) else value
        elif key in _TARGET_KEYS and key not in params:
            target[key] = _norm(key, value)
        elif key in _TRIGGER_KEYS and key not in params:
            trigger[key] = value
        else:
            allowed = ", ".join(("seed", "target", "trigger") + params)
            raise ConfigError(f"{where}.{key}", f"{kind} has no field {key!r}", f"known fields: {allowed}")
    try:
        fault = cls(target=Target(**target), trigger=Trigger(**trigger), **kwargs)
    except TypeError as e:  # a field of the wrong shape that the dataclass itself refused
        raise ConfigError(where, str(e)) from None
    return fault.check(world=world, where=where)


def faults_from(items: Iterable[Mapping] | None, *, world: int | None = None, where: str = "faults") -> list[Fault]:
    """Every record of a list (a scenario's `faults:`); fields named as faults[i].field."""
    if items is None:
        return []
    if isinstance(items, (str, bytes, Mapping)):
        raise ConfigError(where, f"must be a list of faults, got {type(items).__name__}")
    return [
        item if isinstance(item, Fault) else fault_from_dict(item, world=world, where=f"{where}[{i}]")
        for i, item in enumerate(items)
    ]


def typed(items: Iterable[Fault], *, world: int | None = None, where: str = "faults") -> list[Fault]:
    """The records of a list that must be parsed already: the way in for code that carries faults out, so a
    mapping is read in one place (faults_from) and never again on the way. With `world`, ranks are bounded."""
    out = list(items)
    for i, item in enumerate(out):
        if not isinstance(item, Fault):
            raise ConfigError(
                f"{where}[{i}]",
                f"must be a Fault record, got {type(item).__name__}",
                "read mappings with resilience.faults.faults_from (or fault_from_dict) first",
            )
        if world is not None:
            item.check(world=world, where=f"{where}[{i}]")
    return out


def faults_from_text(text: str, *, world: int | None = None) -> list[Fault]:
    """Faults from YAML (or JSON, a subset of it): a list, or a mapping with a `faults` list. Read with
    resilience.safe_yaml: sizes, aliases and tags bounded."""
    from ..safe_yaml import Refused, load

    try:
        doc = load(text).data
    except Refused as e:
        raise ConfigError(
            "faults", "; ".join(f"line {p.line}: {p.problem}" if p.line else p.problem for p in e.problems)
        ) from None
    if isinstance(doc, Mapping) and "faults" in doc:
        doc = doc["faults"]
    return faults_from(doc, world=world)


def with_layer(faults: Iterable[Fault], layer: str) -> list[Fault]:
    return [f for f in faults if f.layer == layer]


def _sub(value, cls, keys, where) -> dict:
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise ConfigError(where, f"must be a mapping, got {type(value).__name__}")
    for key in value:
        if key not in keys:
            raise ConfigError(f"{where}.{key}", f"unknown field {key!r}", f"known fields: {', '.join(keys)}")
    return {k: _norm(k, v) for k, v in value.items()}


def _norm(key: str, value):
    return tuple(value) if key == "rank" and isinstance(value, list) else value


def _int(value, where: str, minimum: int | None = 0) -> None:
    if value is None:
        return
    if isinstance(value, bool) or not isinstance(value, int):
        raise ConfigError(where, f"must be an integer, got {value!r}")
    if minimum is not None and value < minimum:
        what = "negative" if minimum == 0 else f"less than {minimum}"
        raise ConfigError(where, f"{value} is {what}", f"use a value >= {minimum}")


def _number(value, where: str, minimum: float) -> None:
    if value is None:
        return
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise ConfigError(where, f"must be a number of seconds, got {value!r}")
    if value < minimum:
        raise ConfigError(where, f"{value} is negative", f"use a value >= {minimum}")


def _choice(value, allowed, where: str) -> None:
    if value is not None and value not in allowed:
        raise ConfigError(where, f"unknown value {value!r}", f"use one of {', '.join(allowed)}")


def _show(v) -> str:
    if isinstance(v, (tuple, list)):
        return ",".join(str(x) for x in v)
    return str(v)


__all__ = [
    "Fault",
    "FaultLayer",
    "HTTP_OPS",
    "KINDS",
    "LAYERS",
    "OPS",
    "THREADS",
    "Target",
    "Trigger",
    "WHEN",
    "fault_from_dict",
    "faults_from",
    "faults_from_text",
    "matches_path",
    "with_layer",
]
