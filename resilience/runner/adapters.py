"""Which checkpoint implementation a run tests: the single entry point every command, the runner's rank
processes and the pytest plugin use to turn a backend name into a CheckpointBackend.

A run resolves its backend name once (`resolve_backend`) into a `BackendRef`: the name as written and
spelled out, the factory (or the reference, or a broken implementation), its typed options and what the
factory says about itself (resilience.backends.base.FactoryTraits). The ref is passed down to every case,
layout probe, check and listing; only a rank process, a process of its own, resolves the name its plan
carries again, once. The functions taking a name (`make_backend`, `supported_combinations`,
`contract_of`, ...) resolve it and ask the ref, for callers that hold a name alone."""

from __future__ import annotations

import importlib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from ..backends.base import CheckpointBackend, FactoryTraits, traits_of, with_defaults
from ..backends.options import Option, join_spec, resolve_options, show, split_spec
from ..broken.catalogue import CATALOGUE, make_broken
from ..errors import ConfigError
from ..launch import heap
from ..vocab.combos import Combination
from ..vocab.contract import TopologyContract

# short names for the adapters this project ships (an alias may carry options: see split)
ALIASES = {
    "dcp": "resilience.backends.stock_dcp:make",
    "dcp-threads": "resilience.backends.stock_dcp:make[thread_count=4]",
    "megatron": "resilience.backends.megatron:make",
    "nvrx": "resilience.backends.nvrx:make",
}


def split(name: str) -> tuple[str, dict[str, str]]:
    """(the backend without its options, {option: value as written}): `ALIAS:k=v,...` or
    `NAME[k=v,...]` (resilience.backends.options.split_spec). Syntax only."""
    return split_spec(name, ALIASES)


def resolve(name: str) -> str:
    """The backend name with aliases spelled out (options stay as written)."""
    base, given = split(name)
    if base not in ALIASES:
        return name
    full, preset = split(ALIASES[base])
    return join_spec(full, {**preset, **given}, alias=False)


def parse_backend(name: str) -> str:
    """`name` once it reads as a backend, checked without importing anything it names: 'reference',
    'broken:NAME' (resilience.broken.catalogue.CATALOGUE), an alias from ALIASES or 'package.module:factory', each
    but the first two optionally with options (`dcp:thread_count=4,async=process`,
    `pkg.mod:factory[thread_count=4]`; their names and values are checked when the factory is imported).
    Returned with its options written one way. Raises ConfigError with the fix."""
    name = name.strip()
    base, given = split(name)
    if given and (base == "reference" or base.startswith("broken:")):
        raise ConfigError("backend", f"{base} takes no options", f"give {base!r} alone")
    if name == "reference":
        return name
    if name.startswith("broken:"):
        impl = name.split(":", 1)[1]
        if impl not in CATALOGUE:
            raise ConfigError("backend", f"no broken implementation {impl!r}", f"choose from {', '.join(CATALOGUE)}")
        return name
    full, _ = split(resolve(base))
    if ":" not in full:
        aliases = ", ".join(map(repr, ALIASES))
        raise ConfigError(
            "backend", f"cannot read {full!r}", f"use 'reference', 'broken:NAME', {aliases} or 'package.module:factory'"
        )
    module, attr = full.split(":", 1)
    if not module or not attr or not all(p.isidentifier() for p in module.split(".") + attr.split(".")):
        raise ConfigError("backend", f"cannot read {full!r}", "write it as package.module:factory")
    return join_spec(base, given, alias=base in ALIASES)


REFERENCE, BROKEN, FACTORY = "reference", "broken", "factory"  # the kinds of backend a name resolves to
# the reference and its broken variants write through resilience.storage, and state nothing else
_IN_SEAM = FactoryTraits(io_through_seam=True)


@dataclass(frozen=True, eq=False)
class BackendRef:
    """A backend name resolved once: what every part of a run asks about its backend. Equal (and hashed)
    by the name spelled out; pickled as its spec, resolved again where it lands."""

    spec: str
    """The name as written, its options written one way (parse_backend): what a replay, a scenario file
    and a case's history name."""
    full: str
    """The name with its alias spelled out ('resilience.backends.stock_dcp:make[thread_count=4]')."""
    label: str
    """The name without its options ('dcp', 'pkg.mod:factory', 'broken:NAME'): what errors name."""
    kind: str
    """REFERENCE, BROKEN or FACTORY."""
    factory: Any = None
    """The factory (kind FACTORY), else None: the reference or the broken catalogue makes it."""
    options: Mapping[str, Any] = field(default_factory=dict)
    """The spec's options, typed and checked against the factory's declaration (an alias's own first)."""
    traits: FactoryTraits = _IN_SEAM
    """What the factory says about itself (its combinations, contract, keep_last, layout hints, I/O route,
    declared options)."""

    def __str__(self) -> str:
        return self.spec

    def __eq__(self, other: object) -> bool:
        return isinstance(other, BackendRef) and (self.kind, self.full) == (other.kind, other.full)

    def __hash__(self) -> int:
        return hash((self.kind, self.full))

    def __reduce__(self):
        return (resolve_backend, (self.spec,))

    @property
    def given(self) -> dict[str, str]:
        """The options its spec gives, as written (an alias's own presets are not among them)."""
        return split(self.spec)[1]

    def with_options(self, changed: Mapping[str, Any]) -> BackendRef:
        """This backend with the options `changed` set too (over the spec's own), resolved."""
        base, given = split(self.spec)
        return resolve_backend(
            join_spec(base, {**given, **{k: show(v) for k, v in changed.items()}}, alias=base in ALIASES)
        )

    @property
    def module(self) -> str | None:
        """The module its factory is named in ('resilience.backends.stock_dcp'); None for the reference
        and the broken implementations."""
        return split(self.full)[0].split(":", 1)[0] if self.kind == FACTORY else None

    @property
    def through_seam(self) -> bool:
        """Whether every byte it writes or reads goes through resilience.storage (runner.io_route: --io auto)."""
        return self.traits.io_through_seam

    @property
    def object_store(self) -> bool:
        """Whether it writes to an object store itself when the run keeps checkpoints on one (FactoryTraits)."""
        return self.traits.object_store

    @property
    def keep_last(self) -> int | None:
        """How many newest checkpoints it keeps on its own; None when it removes none."""
        return self.traits.keep_last

    @property
    def layout_hints(self) -> dict | None:
        """The roles of files its layout learner would misread ({role: (glob, ...)}), or None."""
        return dict(self.traits.layout_hints) if self.traits.layout_hints is not None else None

    @property
    def declared_options(self) -> tuple[Option, ...]:
        """The options it declares (resilience.backends.options.Option); () for the reference and broken."""
        return self.traits.options

    def writer(self, combo: Combination) -> str | None:
        """Who writes `combo`'s data files, as its factory declares it (FactoryTraits.writer); None: not
        declared (the layout learner finds out)."""
        return self.traits.writer_for(combo, where=f"backend {self.full}: writer")

    def combinations(self) -> list[Combination] | None:
        """The combinations it declares, or None: all."""
        declared = self.traits.combinations
        return list(declared) if declared else None

    def contract(self, combo: Combination) -> TopologyContract:
        """What it promises across topologies for `combo`: its factory's `contract`, else the preset of
        `combo`. ConfigError naming the bad entry."""
        if self.kind != FACTORY:
            return TopologyContract.preset(combo)
        return self.traits.contract_for(combo, where=f"backend {self.full}: contract", source=f"stated by {self.spec}")

    def make(self, combo: Combination) -> CheckpointBackend:
        """The backend for `combo`, as a full CheckpointBackend (resilience.backends.base): the reference,
        a broken implementation, or factory(combo, **options). ConfigError when the factory raises or
        makes something outside the protocol, or its contract does not read."""
        if self.kind == REFERENCE:
            from ..checkpoint.reference import ReferenceBackend

            return ReferenceBackend(combo)
        if self.kind == BROKEN:
            return make_broken(self.label.split(":", 1)[1], combo)
        try:
            backend = self.factory(combo, **self.options) if self.options else self.factory(combo)
        except ConfigError:
            raise
        except Exception as e:
            raise ConfigError(
                "backend",
                f"{self.spec}({combo}) raised {type(e).__name__}: {e}",
                "the factory must return a CheckpointBackend for the combination",
            ) from None
        made = with_defaults(backend, f"backend {self.spec}")
        self.contract(combo)  # a contract that does not read is one clear error before anything runs
        return made


BackendName = str | BackendRef | None  # what the functions below take: a name, or one resolved


def resolve_backend(name: BackendName) -> BackendRef:
    """`name` resolved: 'reference' (or nothing), 'broken:NAME' (resilience.broken.catalogue), an alias
    from ALIASES or 'package.module:factory', the last two with options (parse_backend). The factory is
    imported, its options typed and its traits read here, once; ConfigError with the fix. A BackendRef is
    returned as it is."""
    if isinstance(name, BackendRef):
        return name
    if not name or name == REFERENCE:
        return BackendRef(REFERENCE, REFERENCE, REFERENCE, REFERENCE)
    spec = parse_backend(name)
    if spec.startswith("broken:"):
        impl = CATALOGUE[spec.split(":", 1)[1]]
        combos = tuple(Combination.parse(c) for c in impl.combos) or None
        return BackendRef(spec, spec, spec, BROKEN, traits=FactoryTraits(combinations=combos, io_through_seam=True))
    label = split(spec)[0]
    full = resolve(spec)
    path, given = split(full)
    factory = _import_factory(path)
    traits = traits_of(factory, where=f"backend {full}")
    return BackendRef(spec, full, label, FACTORY, factory, resolve_options(traits.options, given, label), traits)


def _import_factory(name: str) -> Any:
    """The factory 'package.module:factory' names, imported; ConfigError saying how to make it importable."""
    module, attr = name.split(":", 1)
    try:
        found = importlib.import_module(module)
        for part in attr.split("."):
            found = getattr(found, part)
    except ModuleNotFoundError as e:
        top = module.split(".")[0]
        fix = (
            f"make {top!r} importable: run from the folder that holds it with PYTHONPATH=. (the `resilience` "
            "command does not look in the current folder), or install your project (pip install -e .)"
            if e.name and top == e.name.split(".")[0]
            else "install what it imports"
        )
        raise ConfigError("backend", f"cannot import {name!r}: {e}", fix) from None
    except (ImportError, AttributeError) as e:
        raise ConfigError("backend", f"cannot import {name!r}: {e}", "check the module path and factory name") from None
    except Exception as e:  # the module itself failed while importing
        raise ConfigError(
            "backend", f"importing {module!r} raised {type(e).__name__}: {e}", "fix the module or give another one"
        ) from None
    if not _is_factory(found):
        raise ConfigError(
            "backend",
            f"{name!r} is a {type(found).__name__}, not a backend factory",
            "give a Python function or class taking a combination and returning a CheckpointBackend "
            "(see resilience.backends.base)",
        )
    return found


def declared_options(name: BackendName) -> tuple[Option, ...]:
    """The options the backend `name` declares (resilience.backends.options.Option), () for the reference
    and the broken implementations. The options a spec gives are not checked here."""
    if isinstance(name, BackendRef):
        return name.declared_options
    base, _ = split(name or REFERENCE)
    return resolve_backend(base).declared_options


def _is_factory(obj) -> bool:
    """A Python function or class (not a builtin such as os.system) that takes one positional argument."""
    import inspect

    if not (
        inspect.isfunction(obj)
        or inspect.isclass(obj)
        or inspect.ismethod(obj)
        # a __call__ written in Python, not mere callability
        or (callable(obj) and inspect.isfunction(getattr(type(obj), "__call__", None)))  # noqa: B004
    ):
        return False
    try:
        inspect.signature(obj).bind(None)
    except (TypeError, ValueError):
        return False
    return True


def preload(pairs: Iterable[tuple[BackendName, Combination]]) -> None:
    """Make each (backend, combination) once in this process, so the worker and rank processes forked
    from it find every import done (a TORCH_DCP format pulls in torch._dynamo: over a second each time).
    Only a warm-up: a backend that cannot be made is left to its case, which reports why."""
    with heap.loading():
        for name, combo in dict.fromkeys((n or REFERENCE, c) for n, c in pairs):
            try:
                resolve_backend(name).make(combo)
            except Exception:  # noqa: BLE001  the case meets the same error and reports it in its row
                continue


def make_backend(name: BackendName, combo: Combination) -> CheckpointBackend:
    """The backend `name` for `combo` (resolve_backend, then BackendRef.make): 'reference', 'broken:NAME',
    an alias from ALIASES, or 'package.module:factory' (factory(combo) -> backend), the last two with
    options: factory(combo, **options), each option checked against the factory's declared `options`."""
    return resolve_backend(name).make(combo)


def supported_combinations(name: BackendName) -> list[Combination] | None:
    """The combinations a backend's factory declares (its `combinations` attribute), or None: all."""
    return resolve_backend(name).combinations()


def keep_last_of(name: BackendName) -> int | None:
    """How many newest checkpoints the backend keeps on its own (its factory's `keep_last`; NVRx's local
    manager removes every older one after a save), None when it removes none. ConfigError if not a count."""
    return resolve_backend(name).keep_last


def contract_of(name: BackendName, combo: Combination) -> TopologyContract:
    """What the backend promises across topologies for `combo`: its factory's `contract` (a mapping
    {change: "load" | "refuse"}, or a function of the combination returning one), else the preset of
    `combo`. ConfigError naming the bad entry."""
    return resolve_backend(name).contract(combo)
